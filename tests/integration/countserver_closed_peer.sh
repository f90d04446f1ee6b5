# countserver_closed_peer.sh -- the counting server never counts a connection whose client closed before the next one came in (no shim: one plain client), and still counts every one open with it.
. "$(dirname "$0")/../lib/harness.sh"
# hold 2 s: every connection here ends by its client's close, none by the hold
h_server_start 2000
srv_pid=$SRV_PID
# A closes at once, then B connects and stays open; both wait in the accept
# queue while the server is stopped, so that it accepts them back to back,
# before any thread of its own has read A's FIN (as under load)
pair() {
    python3 - "$SRV_PORT" <<'PY'
import socket, sys, time
a = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
a.close()
b = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
time.sleep(0.6)
b.close()
PY
}
for _ in $(seq 10); do
    kill -STOP "$srv_pid"
    pair &
    p=$!
    sleep 0.3
    kill -CONT "$srv_pid"
    wait "$p"
done
max=$(h_server_stat max)
h_note "10 close-then-connect pairs accepted back to back: server max $max, total $(h_server_stat total)"
[ "$max" -eq 1 ] || h_fail "the server counted a connection closed before the next one came: max $max, want 1"
# the same without stopping it: 600 close-then-connect pairs in a row
python3 - "$SRV_PORT" <<'PY'
import socket, sys
for _ in range(600):
    socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()
PY
max=$(h_server_stat max)
h_note "600 more in a row: server max $max, total $(h_server_stat total)"
[ "$max" -eq 1 ] || h_fail "600 close-then-connect pairs: server max $max, want 1"
# connections open together are all counted, one closed before its accept
# too: three kept open, and a fourth that connects and closes while they are
python3 - "$SRV_PORT" <<'PY'
import socket, sys, time
cs = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(3)]
socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()
time.sleep(0.5)
for c in cs:
    c.close()
PY
max=$(h_server_stat max)
h_note "three kept open, a fourth opened and closed meanwhile: server max $max"
[ "$max" -eq 4 ] || h_fail "four connections open at once: server max $max, want 4"
echo ok
