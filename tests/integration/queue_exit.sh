# queue_exit.sh -- queued connects whose descriptors go by close_range (Python's os.closerange), whose process
# exits normally, or is killed: each gives its ticket back (at once; at once at exit; killed: its tickets end
# with their TTL and the next acquire sweeps them), the holder's permit is untouched, and nothing hangs.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
h_redis_start
h_server_start 600000
h_conf "$T/c.conf" qx 1 3000 20000 "127.0.0.1:$SRV_PORT"
queued() { h_rcli zcard 'conncap:{qx}:queue'; }
queued_is() { [ "$(queued)" -eq "$1" ]; }
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 >"$T/hold.out" 2>"$T/hold.err" < <(sleep 60) &
_pids+=("$!")
WAIT_S=10 h_wait_for h_holders_is qx 1 || h_fail "the holder got no permit"
cat >"$T/q.py" <<'PY'
import errno, os, socket, sys, time
port, how = int(sys.argv[1]), sys.argv[2]
socks = []
for i in range(5):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError as e:
        assert e.errno == errno.EINPROGRESS, e
    socks.append(s)
print("queued", len(socks), flush=True)
sys.stdin.readline()                      # the test saw the tickets
fds = sorted(s.detach() for s in socks)
if how == "closerange":
    os.closerange(fds[0], fds[-1] + 1)    # close_range(2) through libc
    print("closed", flush=True)
    sys.stdin.readline()
    sys.exit(0)
if how == "exit":
    sys.exit(0)                           # exit() with the five still queued
time.sleep(60)                            # killed
PY
run() { # HOW: five queued connects, then HOW
    coproc Q { exec env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" python3 "$T/q.py" "$SRV_PORT" "$1" 2>"$T/q-$1.err"; }
    read -r -t 10 line <&"${Q[0]}" || h_fail "$1: no output: $(cat "$T/q-$1.err")"
    [ "$line" = "queued 5" ] || h_fail "$1: $line"
    WAIT_S=5 h_wait_for queued_is 5 || h_fail "$1: $(queued) tickets queued, want 5"
}
run closerange
echo go >&"${Q[1]}"
read -r -t 10 line <&"${Q[0]}"; [ "$line" = closed ] || h_fail "closerange: $line"
t0=$(date +%s%N)
WAIT_S=3 h_wait_for queued_is 0 || h_fail "closerange: $(queued) tickets left after close_range"
h_note "close_range: 5 tickets gone $(( ($(date +%s%N) - t0) / 1000000 )) ms after the close"
echo go >&"${Q[1]}"; wait "$Q_PID"

run exit
echo go >&"${Q[1]}"
wait "$Q_PID" || h_fail "exit: the program exited $?"
[ "$(queued)" -eq 0 ] || h_fail "exit: $(queued) tickets left after the process exited"
h_note "exit: no ticket left when the process was gone"

# killed: its tickets end with their TTL (3 s here), swept by the semaphore's next acquire
run kill
kill -9 "$Q_PID"; wait "$Q_PID" 2>/dev/null
sleep 3.5
CONF_EXTRA='nonblocking = "fail";' h_conf "$T/f.conf" qx 1 3000 20000 "127.0.0.1:$SRV_PORT"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/f.conf" python3 -c '
import socket, sys
s = socket.socket(); s.setblocking(False)
try: s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError as e: print(e.errno)' "$SRV_PORT" >"$T/probe.out" 2>"$T/probe.err"
[ "$(queued)" -eq 0 ] || h_fail "kill: $(queued) tickets left after their TTL and an acquire"
h_note "SIGKILL: the 5 tickets swept by the next acquire once their TTL (3 s) passed"
[ "$(h_holders qx)" -eq 1 ] || h_fail "the holder's permit is gone: $(h_holders qx) holders"
[ "$(h_server_stat total)" -eq 1 ] || h_fail "a queued connect reached the server: total $(h_server_stat total)"
echo ok
