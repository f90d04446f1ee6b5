# names_hooks.sh -- each interposed resolver call (getaddrinfo, gethostbyname, gethostbyname2, gethostbyname_r,
# gethostbyname2_r) teaches the shim a name; results, errno and h_errno are the program's own; the shim's own
# lookups (its Redis host) are not recorded.
. "$(dirname "$0")/../lib/harness.sh"
NSSW=$(dpkg -L libnss-wrapper 2>/dev/null | grep '/libnss_wrapper\.so$' | head -n1)
[ -r "$NSSW" ] || h_fail "libnss_wrapper.so not found (Debian package libnss-wrapper)"
if [ "${SAN:-}" = tsan ]; then echo "skipped under SAN=tsan: nss_wrapper's own locking trips ThreadSanitizer"; exit 77; fi
printf '127.0.0.1 api.partner.test\n127.0.0.1 other.test\n127.0.0.1 redis.test\n' > "$T/hosts"
export NSS_WRAPPER_HOSTS="$T/hosts"
[ -n "${SAN:-}" ] && export NSS_WRAPPER_DISABLE_DEEPBIND=1
h_redis_start
h_server_start 50
# limit 0, no wait: a matched connect fails at once with ETIMEDOUT, an unmatched one connects
h_conf "$T/c.conf" api 0 5000 0 "api.partner.test"
# The shim first, nss_wrapper after it: the program's resolver calls reach
# the shim, whose RTLD_NEXT is nss_wrapper's (the order `conncap run` makes).
shim() { LD_PRELOAD="$LIB:$NSSW" CONNCAP_CONFIG="$T/c.conf" "$@" 2>/dev/null; }
plain() { LD_PRELOAD="${SAN:+${LIB%%:*}:}$NSSW" "$@" 2>/dev/null; }

for f in getaddrinfo gethostbyname gethostbyname2 gethostbyname_r gethostbyname2_r; do
    out=$(shim "$PROGS/resolvecon" "$f" api.partner.test "$SRV_PORT")
    echo "$out" | grep -qx 'connect ETIMEDOUT' || h_fail "$f api.partner.test: not capped: $out"
    out=$(shim "$PROGS/resolvecon" "$f" other.test "$SRV_PORT")
    echo "$out" | grep -qx 'connect ok' || h_fail "$f other.test: $out"
    # what the call returned and left in errno/h_errno, with and without the shim
    for n in api.partner.test other.test nope.test; do
        a=$(shim "$PROGS/resolvecon" "$f" "$n" "$SRV_PORT" | head -n1)
        b=$(plain "$PROGS/resolvecon" "$f" "$n" "$SRV_PORT" | head -n1)
        [ "$a" = "$b" ] || h_fail "$f $n: with the shim \"$a\", without \"$b\""
    done
    h_note "$f: capped by name, other name passes, results/errno/h_errno unchanged"
done
# a numeric host is not a name
out=$(shim "$PROGS/resolvecon" getaddrinfo 127.0.0.1 "$SRV_PORT")
echo "$out" | grep -qx 'connect ok' || h_fail "numeric host taken for a name: $out"

if [ -n "${SAN:-}" ]; then echo "ok (the guard check runs python3: skipped under SAN=$SAN)"; exit 0; fi
# The shim's own lookup of its Redis host runs guarded and is not recorded:
# rule 2 matches redis.test on any port, so a connect to 127.0.0.1 matches
# it only if that name was recorded for 127.0.0.1.
cat > "$T/g.conf" <<CONF
redis = { host = "redis.test"; port = $REDIS_PORT; connect_timeout_ms = 500; command_timeout_ms = 500; };
semaphores = ( { name = "api"; limit = 5; wait_timeout_ms = 5000; }, { name = "r"; limit = 0; wait_timeout_ms = 0; } );
rules = ( { semaphore = "api"; match = ( "api.partner.test:$SRV_PORT" ); },
          { semaphore = "r"; match = ( "redis.test" ); } );
CONF
guard_client() {
    LD_PRELOAD="$NSSW" "$CLI" run -c "$T/g.conf" -- python3 -c '
import errno, socket, sys
port, rport, extra = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
s = socket.create_connection(("api.partner.test", port))   # a permit: the shim connects to redis.test
for n in extra:
    socket.getaddrinfo(n, 80)                                # the program itself resolves these
try:
    t = socket.create_connection(("127.0.0.1", rport)); t.close(); print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
s.close()' "$SRV_PORT" "$REDIS_PORT" "$@" 2>"$T/guard.err"
}
evalsha() { h_rcli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_\(evalsha\|eval\|fcall\):calls=\([0-9]*\),.*/\2/p' | awk '{n += $1} END {print n + 0}'; }
before=$(evalsha)
out=$(guard_client)
[ "$out" = ok ] || h_fail "the shim's own lookup of redis.test was recorded: $out ($(cat "$T/guard.err"))"
after=$(evalsha)
[ "${after:-0}" -gt "${before:-0}" ] || h_fail "the shim never reached Redis at redis.test ($(cat "$T/guard.err"))"
out=$(guard_client redis.test)
[ "$out" = ETIMEDOUT ] || h_fail "control: the program's own lookup of redis.test should match rule 2, got $out"
h_note "the shim's own resolution of its Redis host is not recorded; the program's is"
echo ok
