# config_run_handover.sh -- `conncap run` hands the configuration it checked to the shim (issue 24), so a program that runs
# as a user who cannot read the file (`conncap run -- setpriv --reuid nobody PROG`, gosu, runuser) is capped with
# exactly that configuration, its secret included, and the secret never reaches the program's environment.
# The file is mode 0600 in a 0700 directory, the Redis password (requirepass) in a 0400 password_file.
#  1. as nobody, with LD_PRELOAD alone: the shim cannot read the file: one clear line, every connection
#     passes through (as documented for an unreadable configuration);
#  2. `conncap run -- setpriv ... privclient` (6 threads, limit 2): capped at 2, all 6 answered, no line
#     about the configuration; the password is in neither the program's environment nor its arguments;
#  3. the file changed after `conncap run` checked it (limit 2 -> 5, before the program starts): the
#     program uses the checked one (still capped at 2);
#  4. the descriptor carrying it reaches an image exec'd with the shim, not one exec'd without it;
#  5. `conncap run` still refuses a bad file (exit 125), and an unreadable one.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only # setpriv, sh, ls: third-party programs under the shim
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (the program runs as nobody)"; exit 77; }
command -v setpriv >/dev/null || { echo "skipped: no setpriv (util-linux)"; exit 77; }
PW="pw-$RANDOM$RANDOM"
REDISCLI_AUTH=$PW REDIS_EXTRA="--requirepass $PW" h_redis_start
h_rcli() { REDISCLI_AUTH=$PW redis-cli -s "$REDIS_SOCK" "$@"; } # the password stays out of the programs' environment
chmod 0711 "$T"
S="$T/secret"
mkdir -m 0700 "$S"
printf '%s\n' "$PW" > "$S/pw"
chmod 0400 "$S/pw"
conf() { # LIMIT PORT: the configuration, mode 0600
    cat > "$S/c.conf" <<CONF
redis = { host = "127.0.0.1"; port = $REDIS_PORT; password_file = "$S/pw"; connect_timeout_ms = 300;
          command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "ho"; limit = $1; lease_ms = 30000; wait_timeout_ms = 20000; } );
rules = ( { semaphore = "ho"; match = ( "127.0.0.1:$2" ); } );
CONF
    chmod 0600 "$S/c.conf"
}
busy() { [ "$(h_server_stat cur 2>/dev/null || echo 0)" -ge 1 ]; } # the counting server holds a connection
AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
bad=()
no() { bad+=("$*"); }

# 1. LD_PRELOAD alone, as nobody from the start
h_server_start 300
conf 2 "$SRV_PORT"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$S/c.conf" "${AS_NOBODY[@]}" "$PROGS/privclient" "$SRV_PORT" 6 >"$T/plain.out" 2>"$T/plain.err"
h_note "as nobody, LD_PRELOAD alone: $(tail -n 1 "$T/plain.out"); upstream max $(h_server_stat max); the shim said: $(sed 's/^conncap\[[0-9]*\]: //' "$T/plain.err" | sort | uniq -c | paste -sd'|' -)"
[ "$(grep -c 'Permission denied' "$T/plain.err")" -eq 1 ] || no "plain: want one line saying the file cannot be read: $(cat "$T/plain.err")"
grep -q 'passing every connection through' "$T/plain.err" || no "plain: the line does not say connections pass through"
grep -qx 'ok 6 fail 0' "$T/plain.out" || no "plain: $(tail -n 1 "$T/plain.out")"

# 2. conncap run, then setpriv: the program runs as nobody
h_server_start 300
conf 2 "$SRV_PORT"
"$CLI" run -c "$S/c.conf" -- "${AS_NOBODY[@]}" "$PROGS/privclient" "$SRV_PORT" 6 >"$T/run.out" 2>"$T/run.err"
rc=$?
h_note "conncap run -- setpriv (nobody): exit $rc, $(tail -n 1 "$T/run.out"); upstream max $(h_server_stat max), total $(h_server_stat total); the shim said: $(sed 's/^conncap\[[0-9]*\]: //' "$T/run.err" | sort | uniq -c | paste -sd'|' -)"
grep -qx 'ok 6 fail 0' "$T/run.out" || no "run: $(tail -n 1 "$T/run.out")"
max=$(h_server_stat max)
[ "$max" -le 2 ] || no "run: cap exceeded: the upstream saw $max, limit 2"
[ "$max" -ge 2 ] || no "run: the cap of 2 was never reached (max $max)"
grep -qi 'configuration\|denied' "$T/run.err" && no "run: the shim said something about the configuration: $(cat "$T/run.err")"
# the program's environment and arguments, while it runs (it holds its connections 300 ms)
h_server_start 2000
conf 2 "$SRV_PORT"
"$CLI" run -c "$S/c.conf" -- "${AS_NOBODY[@]}" "$PROGS/privclient" "$SRV_PORT" 1 >"$T/env.out" 2>"$T/env.err" &
runpid=$!
WAIT_S=5 h_wait_for busy ||
    no "env: the program did not connect"
tr '\0' '\n' </proc/$runpid/environ >"$T/env.seen" 2>/dev/null
tr '\0' ' ' </proc/$runpid/cmdline >"$T/cmdline.seen" 2>/dev/null
ls -l /proc/$runpid/fd >"$T/fds.seen" 2>/dev/null
wait $runpid
grep -q "$PW" "$T/env.seen" "$T/cmdline.seen" && no "env: the password is in the program's environment or arguments"
grep -q '^CONNCAP_CONFIG_FD=[0-9]*$' "$T/env.seen" || no "env: no CONNCAP_CONFIG_FD in the program's environment: $(grep CONNCAP "$T/env.seen")"
h_note "the program's CONNCAP_* variables: $(grep ^CONNCAP_ "$T/env.seen" | paste -sd' ' -); its descriptor: $(grep -o 'memfd:.*' "$T/fds.seen" | head -n 1)"

# 3. changed after the check: the checked one is used
h_server_start 300
conf 2 "$SRV_PORT"
mkfifo "$T/go"
"$CLI" run -c "$S/c.conf" -- sh -c 'read x < "$0"; exec "$@"' "$T/go" "${AS_NOBODY[@]}" "$PROGS/privclient" "$SRV_PORT" 6 \
    >"$T/toctou.out" 2>"$T/toctou.err" &
runpid=$!
sleep 0.5
conf 5 "$SRV_PORT"
echo go > "$T/go"
wait $runpid
h_note "file changed to limit 5 after the check of limit 2: $(tail -n 1 "$T/toctou.out"); upstream max $(h_server_stat max)"
grep -qx 'ok 6 fail 0' "$T/toctou.out" || no "toctou: $(tail -n 1 "$T/toctou.out")"
[ "$(h_server_stat max)" -eq 2 ] || no "toctou: the upstream saw $(h_server_stat max) at once: want 2, the limit conncap run checked"

# 4. the descriptor: kept across an exec with the shim, not one without it
"$CLI" run -c "$S/c.conf" -- sh -c 'ls -l /proc/self/fd/ | grep -c memfd; env -u LD_PRELOAD ls -l /proc/self/fd/ | grep -c memfd' \
    >"$T/fd.out" 2>"$T/fd.err"
h_note "memfd descriptors seen by ls exec'd with the shim, and without: $(paste -sd' ' "$T/fd.out")"
[ "$(paste -sd' ' "$T/fd.out")" = "1 0" ] || no "fd: want the descriptor in an image with the shim only, saw: $(cat "$T/fd.out")"

# 5. conncap run still refuses what it cannot use
conf 2 "$SRV_PORT"
echo 'semaphores = ( { name = "x"; limit = -1; } );' >> "$S/c.conf"
"$CLI" run -c "$S/c.conf" -- true 2>"$T/refuse.err"
rc=$?
[ $rc -eq 125 ] || no "refuse: a bad file gave exit $rc, want 125: $(cat "$T/refuse.err")"
conf 2 "$SRV_PORT"
"${AS_NOBODY[@]}" "$CLI" run -c "$S/c.conf" -- true 2>"$T/refuse2.err"
rc=$?
[ $rc -eq 125 ] || no "refuse: an unreadable file gave exit $rc, want 125"
h_note "refused: bad file exit 125 ($(head -c 120 "$T/refuse.err")); unreadable: exit $rc ($(head -c 120 "$T/refuse2.err"))"
[ ${#bad[@]} -eq 0 ] || h_fail "$(printf '%s\n' "${bad[@]}")"
echo ok
