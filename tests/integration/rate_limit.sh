# rate_limit.sh -- rate 50/s, burst 10: 200 connects take about (200 - 10) / 50 = 3.8 s, and the server never sees more than burst + rate * t in any window.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 0
WARM=$SRV_PORT
# the measure: accept times taken by a small C listener (the Python
# countserver's own work per accept would blur them)
"$PROGS/acceptlog" "$T/port" "$T/accepts" &
_pids+=("$!")
h_wait_file "$T/port" || h_fail "acceptlog did not start"
SRV_PORT=$(cat "$T/port")
cat >"$T/c.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "api"; limit = 50; lease_ms = 30000; wait_timeout_ms = 20000; rate = 50.0; burst = 10; },
               { name = "warm"; limit = 50; } );
rules = ( { semaphore = "api"; match = ( "127.0.0.1:$SRV_PORT" ); }, { semaphore = "warm"; match = ( "127.0.0.1:$WARM" ); } );
CONF
# 4 processes x 50 connects, each closed at once (after one warm-up connect
# on another semaphore: the shim's start-up is not in the timed connects)
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/connloop" 127.0.0.1 "$SRV_PORT" 4 50 0 "$WARM" >"$T/out" \
    || h_fail "some connects failed: $(grep -v '^ok' "$T/out" | head -3)"
WAIT_S=5 h_wait_for eval '[ "$(wc -l <"$T/accepts")" -ge 200 ]' || h_fail "server saw $(wc -l <"$T/accepts") connects, want 200"
python3 - "$T/accepts" <<'PY' || h_fail "rate exceeded"
import os, sys
rate, burst = 50.0, 10
t = sorted(float(l) for l in open(sys.argv[1]))
span = t[-1] - t[0]
# The window property on the server's accept times: any k consecutive
# accepts span at least (k - burst) / rate s, i.e. no window of t s holds more
# than burst + rate * t. One connect too many makes some window a whole slot
# (1 / rate = 20 ms) too dense; the time from a grant in Redis to the
# server's accept varies by a few ms per connect (scheduling), so half a slot
# of slack.
# (a whole slot in a sanitizer build, which runs many times slower)
slack = float(os.environ.get("RATE_SLACK", (1.0 if os.environ.get("SAN") else 0.5) / rate))
worst, where = 0.0, None
for i in range(len(t)):
    for j in range(i + burst, len(t)):
        need = (j - i + 1 - burst) / rate - slack
        if t[j] - t[i] < need and need - (t[j] - t[i]) > worst:
            worst, where = need - (t[j] - t[i]), (i, j)
print("  %d accepts in %.2f s (ideal 3.80 s)%s" % (len(t), span, "" if not where else
      "; window %s..%s too dense by %.1f ms beyond the slack" % (where[0], where[1], worst * 1000)),
      file=sys.stderr)
ok = where is None and len(t) == 200 and 3.4 <= span <= 8.0
sys.exit(0 if ok else 1)
PY
echo ok
