# ops_syslog.sh -- log = "syslog": the shim's lines reach /dev/log (a private one, in a mount namespace), tagged conncap[pid], and nothing goes to the program's stderr.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 100
# limit 0 and no wait: every connect is refused at once and the shim logs a warning
CONF_EXTRA='log = "syslog";' h_conf "$T/sys.conf" api 0 3000 0 "127.0.0.1:$SRV_PORT"
h_conf "$T/err.conf" api 0 3000 0 "127.0.0.1:$SRV_PORT"
# client CONF: one connect under the shim, refused: prints "error ETIMEDOUT ..." on stdout
client() {
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$1" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0
    [ $? -eq 1 ]
}

# the same event with log = "stderr" is on stderr: the check below can see a line
client "$T/err.conf" >/dev/null 2>"$T/stderr.1" || h_fail "client not refused"
grep -q "^conncap\[[0-9]*\]: warn: no permit of api within [0-9]* ms" "$T/stderr.1" || h_fail "stderr target: $(cat "$T/stderr.1")"
# with log = "syslog": nothing on the program's stderr (stdout is the client's own)
out=$(client "$T/sys.conf" 2>"$T/stderr.2") || h_fail "client not refused: $out"
case "$out" in "error ETIMEDOUT "*) ;; *) h_fail "client printed $out" ;; esac
[ ! -s "$T/stderr.2" ] || h_fail "log = syslog wrote to stderr: $(cat "$T/stderr.2")"

# delivery: a datagram receiver bound on /dev/log in a private mount namespace
# (a tmpfs over /dev there; the real devices bound back), the client inside it
if ! unshare -m --propagation private true 2>/dev/null; then
    echo "syslog delivery not checked: no mount namespace here (unshare -m needs CAP_SYS_ADMIN)"
    exit 77
fi
cat > "$T/sink.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
open(sys.argv[2], "w").close()          # ready
s.settimeout(20)
with open(sys.argv[1], "ab") as f:
    while True:
        d = s.recv(65536)
        f.write(d.replace(b"\n", b" ") + b"\n")
        f.flush()
PY
export T LIB ROOT SRV_PORT PROGS
unshare -m --propagation private bash -c '
    set -e
    mkdir "$T/realdev"
    mount --bind /dev "$T/realdev"
    mount -t tmpfs -o mode=755 conncap-test-dev /dev
    for n in null zero random urandom full tty; do
        [ -e "$T/realdev/$n" ] || continue
        touch "/dev/$n"; mount --bind "$T/realdev/$n" "/dev/$n"
    done
    ln -s /proc/self/fd /dev/fd
    python3 "$T/sink.py" "$T/syslog.txt" "$T/sink.ready" & sink=$!
    for i in $(seq 200); do [ -e "$T/sink.ready" ] && break; sleep 0.05; done
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/sys.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/out.3" 2>"$T/stderr.3" & c=$!
    echo $c > "$T/client.pid"
    wait $c || true
    for i in $(seq 200); do [ -s "$T/syslog.txt" ] && break; sleep 0.05; done
    kill $sink
' || h_fail "running the client in a mount namespace failed"
pid=$(cat "$T/client.pid")
h_note "received: $(cat "$T/syslog.txt")"
[ ! -s "$T/stderr.3" ] || h_fail "log = syslog wrote to stderr: $(cat "$T/stderr.3")"
# <12> is facility user (1) * 8 + warning (4); the tag names the program's pid
grep -Eq "^<12>.* conncap\[$pid\]: warn: no permit of api within [0-9]+ ms for 127\.0\.0\.1:$SRV_PORT: holders 0/0, queue 0: connect fails with ETIMEDOUT$" "$T/syslog.txt" ||
    h_fail "no syslog line from pid $pid: $(cat "$T/syslog.txt")"
echo ok
