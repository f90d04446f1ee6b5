# lifecycle_real.sh -- real programs under the shim, the holder set empty after each: python3 starting
# subprocesses while it holds sockets, curl to localhost (::1 and 127.0.0.1), nc, and Java (NIO close
# uses dup2) when a JDK is installed.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_plain_only
h_redis_start
h_server_start 200 --v6
lc_setup 30000 100
empty() { [ "$(h_holders lc)" -eq 0 ] || h_fail "$1: holders left: $(h_rcli zrange 'conncap:{lc}:holders' 0 -1)"; }

lc_drive python3 python3 "$ROOT/tests/lib/lc_subprocess.py" "$SRV_PORT"
empty python3

run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$LC_CONF" "$@"; }
total=$(h_server_stat total)
for url in "http://localhost:$SRV_PORT/" "http://127.0.0.1:$SRV_PORT/" "http://[::1]:$SRV_PORT/"; do
    out=$(run curl -sS --happy-eyeballs-timeout-ms 1 -o /dev/null -w '%{http_code} %{remote_ip}' "$url") \
        || h_fail "curl $url failed: $out"
    h_note "curl $url: $out"
    [ "${out%% *}" = 200 ] || h_fail "curl $url: $out"
    empty "curl $url"
done
# eight at once, each racing ::1 against 127.0.0.1
pids=()
for i in 1 2 3 4 5 6 7 8; do run curl -sS -o /dev/null --happy-eyeballs-timeout-ms 1 "http://localhost:$SRV_PORT/" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || h_fail "a concurrent curl failed"; done
empty "concurrent curl"

# the loser of the race: 127.0.0.2 hangs (a listener with a full backlog drops SYNs), ::1 answers;
# curl's IPv4 socket holds a permit until curl closes it
python3 -c '
import socket, sys, time
l = socket.socket(); l.bind(("127.0.0.2", int(sys.argv[1]))); l.listen(0)
fill = [socket.socket() for _ in range(3)]
for f in fill:
    f.setblocking(False); f.connect_ex(("127.0.0.2", int(sys.argv[1])))
time.sleep(0.2)
open(sys.argv[2], "w").write("ready")
time.sleep(600)' "$SRV_PORT" "$T/bh.ready" &
_pids+=($!)
h_wait_file "$T/bh.ready" || h_fail "no black hole"
h_conf "$LC_CONF" lc 100 30000 5000 "127.0.0.1:$SRV_PORT" "[::1]:$SRV_PORT" "127.0.0.2:$SRV_PORT"
redis-cli -s "$REDIS_SOCK" monitor > "$T/monitor" &
mon=$!
sleep 0.3
out=$(run curl -sS -o /dev/null --happy-eyeballs-timeout-ms 100 --resolve "lc.test:$SRV_PORT:127.0.0.2,[::1]" \
      -w '%{http_code} %{remote_ip}' "http://lc.test:$SRV_PORT/") || h_fail "curl with a losing address failed: $out"
sleep 0.3
kill $mon; wait $mon 2>/dev/null
loser=$(grep -c "127.0.0.2:$SRV_PORT" "$T/monitor" || true)
h_note "curl racing 127.0.0.2 (hangs) against ::1: $out; Redis calls naming the loser's permit: $loser"
[ "${out%% *}" = 200 ] && [ "${out#* }" = ::1 ] || h_fail "curl: $out"
[ "$loser" -ge 2 ] || h_fail "the losing socket took no permit or never gave it back ($loser calls)"
empty "curl with a loser"
lc_setup 30000 100

printf 'GET / HTTP/1.0\r\n\r\n' | run nc -N 127.0.0.1 "$SRV_PORT" | grep -q '^HTTP/1.0 200' || h_fail "nc got no answer"
empty "nc"
run nc -z 127.0.0.1 "$SRV_PORT" || h_fail "nc -z failed"
empty "nc -z"
run nc -z -6 ::1 "$SRV_PORT" || h_fail "nc -z -6 failed"
empty "nc -z -6"
h_note "the server saw $(( $(h_server_stat total) - total )) connections from curl and nc"

if command -v java >/dev/null && java --list-modules 2>/dev/null | grep -q '^jdk.compiler'; then
    mkdir -p "$T/java"
    cat > "$T/java/Lc.java" <<'JAVA'
import java.io.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.channels.*;

public class Lc {
    static BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    static void step(String name, int n) throws IOException {
        System.out.println("@" + name + " " + n);
        System.out.flush();
        if (!in.readLine().startsWith("ok")) System.exit(1);
    }
    public static void main(String[] a) throws Exception {
        InetSocketAddress dst = new InetSocketAddress("127.0.0.1", Integer.parseInt(a[0]));
        SocketChannel ch = SocketChannel.open(dst);
        step("nio-open", 1);
        ch.close();
        step("nio-closed", 0);
        Socket s = new Socket(dst.getAddress(), dst.getPort());
        step("socket-open", 1);
        s.close();
        step("socket-closed", 0);
        // a thread blocked in read: close() dup2's a dead socket over the fd first
        SocketChannel c2 = SocketChannel.open(dst);
        Thread t = new Thread(() -> { try { c2.read(ByteBuffer.allocate(16)); } catch (IOException e) { } });
        t.start();
        Thread.sleep(300);
        step("blocked-read", 1);
        c2.close();
        t.join();
        step("async-closed", 0);
    }
}
JAVA
    LC_STEP_WAIT=10 lc_drive java java -Xshare:auto "$T/java/Lc.java" "$SRV_PORT"
    empty java
else
    h_note "no JDK with jdk.compiler here: the Java case is skipped"
fi
echo ok
