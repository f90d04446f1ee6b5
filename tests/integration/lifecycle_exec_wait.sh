# lifecycle_exec_wait.sh -- exec or exit while another thread waits for a permit: the waiter's ticket leaves the queue with the image (no dead ticket holds the FIFO for a TTL); after a failed exec the waiter goes on and gets its permit.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" s 1 30000 20000 "127.0.0.1:$SRV_PORT"
export CONNCAP_CONFIG="$T/c.conf"
qlen_is() { [ "$(h_rcli zcard 'conncap:{s}:queue')" -eq "$1" ]; }
# we.py PORT PATH: a thread connects (and waits); after 1 s the main thread
# execs PATH (PATH "exit": returns from the program); if the exec fails, it
# prints the thread's outcome
cat >"$T/we.py" <<'PY'
import os, socket, sys, threading, time
out = []
def one():
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1]))); out.append("connected")
    except OSError as e:
        out.append("error %s" % e)
t = threading.Thread(target=one, daemon=True)
t.start()
time.sleep(1)
if sys.argv[2] == "exit":
    sys.exit(0)
try:
    os.execv(sys.argv[2], [sys.argv[2], "30"])
except OSError as e:
    print("exec failed", e.errno, flush=True)
t.join()
print(out[0], flush=True)
PY
mkfifo "$T/a.in"
LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" &
A=$!
exec 7>"$T/a.in"
WAIT_S=5 h_wait_for h_holders_is s 1 || h_fail "the holder got no permit"

# a successful exec: the waiting thread is gone, and so is its ticket
LD_PRELOAD="$LIB" /usr/bin/python3 "$T/we.py" "$SRV_PORT" /bin/sleep >"$T/e.out" 2>"$T/e.err" 7>&- &
E=$!
_pids+=("$E")
WAIT_S=5 h_wait_for grep -q sleep "/proc/$E/comm" || h_fail "no exec: $(cat "$T/e.out" "$T/e.err")"
WAIT_S=5 h_wait_for qlen_is 0 || h_fail "the exec left $(h_rcli zcard 'conncap:{s}:queue') ticket(s) in the queue"

# a normal exit: same
LD_PRELOAD="$LIB" /usr/bin/python3 "$T/we.py" "$SRV_PORT" exit >"$T/x.out" 2>"$T/x.err" 7>&- ||
    h_fail "the exiting program failed: $(cat "$T/x.err")"
qlen_is 0 || h_fail "the exit left $(h_rcli zcard 'conncap:{s}:queue') ticket(s) in the queue"

# a failed exec: the waiter goes on (a new ticket) and gets the permit the holder gives back
LD_PRELOAD="$LIB" /usr/bin/python3 "$T/we.py" "$SRV_PORT" /nonexistent/prog >"$T/f.out" 2>"$T/f.err" 7>&- &
F=$!
WAIT_S=5 h_wait_for grep -q 'exec failed' "$T/f.out" || h_fail "exec did not fail: $(cat "$T/f.out" "$T/f.err")"
WAIT_S=5 h_wait_for qlen_is 1 || h_fail "after the failed exec the waiter is not queued: $(h_rcli zcard 'conncap:{s}:queue')"
exec 7>&-
wait "$A" || h_fail "the holder failed"
WAIT_S=8 h_wait_for grep -q '^connected' "$T/f.out" || h_fail "the waiter did not get the permit: $(cat "$T/f.out")"
wait "$F"

# a newcomer gets the free permit at once: no dead ticket ahead of it
kill "$E" 2>/dev/null
WAIT_S=5 h_wait_for h_holders_is s 0 || h_fail "holders left: $(h_holders s)"
"$CLI" stats -c "$T/c.conf" >/dev/null
out=$(LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0) || h_fail "the newcomer failed: $out"
set -- $out
awk -v ms="$3" 'BEGIN { exit !(ms < 3000) }' || h_fail "the newcomer waited $3 ms"
echo ok
