# redis_socket_denied.sh -- a worker that may not open the Redis Unix socket (a daemon's workers as
# nobody, the socket 0700 root's): the log says Redis cannot be reached and why (Permission denied),
# on_redis_down applies, and it does not blame the worker's ACL for refusing acquire's short call (the
# old code did, and gave up the short call for the process's life, for a failure to connect).
. "$(dirname "$0")/../lib/harness.sh"
[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null || h_skip "needs root and setpriv"
h_redis_start
h_server_start 100
ON_DOWN=open h_conf "$T/c.conf" sd 1 10000 2000 "127.0.0.1:$SRV_PORT"
# nobody reads the shim, the program and the file from here (the tree may be under a private home)
mkdir -p "$T/nb"
# (under SAN=asan LIB is "libasan.so:libconncap.so": the sanitizer's runtime stays where it is, readable)
shim=${LIB##*:} pre=""
[ "$shim" = "$LIB" ] || pre="${LIB%:*}:"
cp "$shim" "$PROGS/failclient" "$T/c.conf" "$T/nb/"
chmod 755 "$T" "$T/nb"
chmod 644 "$T/nb/c.conf"
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups env LD_PRELOAD="$pre$T/nb/$(basename "$shim")" \
    CONNCAP_CONFIG="$T/nb/c.conf" "$T/nb/failclient" try 127.0.0.1 "$SRV_PORT" 2 2>"$T/err")
h_note "connects: $(echo $out); log: $(head -c 400 "$T/err")"
[ "$(echo "$out" | grep -c '^ok')" = 2 ] || h_fail "connects under on_redis_down = open: '$out', want 2 ok"
grep -q 'Permission denied' "$T/err" || h_fail "the log does not say why Redis cannot be reached: $(head -n 3 "$T/err")"
grep -q 'short call' "$T/err" && h_fail "a failure to connect was logged as Redis refusing the short call: $(grep 'short call' "$T/err")"
echo ok
