# ops_watch.sh -- `conncap watch`: snapshots when stdout is no terminal, a refreshing screen in a pty that quits on q, and Ctrl-C.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" api 2 3000 200 "127.0.0.1:$SRV_PORT"
bgclient() {
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 60000 >/dev/null &
    printf -v "$1" %s $!
}
bgclient a; bgclient b
WAIT_S=10 h_wait_for h_holders_is api 2 || h_fail "no two holders"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 2>/dev/null | grep -q "^error ETIMEDOUT " ||
    h_fail "a third client was not refused"

# not a tty: N plain snapshots
"$CLI" watch -c "$T/c.conf" --interval 0.3 --iterations 3 >"$T/w.txt" </dev/null || h_fail "watch failed"
grep -q $'\033' "$T/w.txt" && h_fail "escape codes written to a file"
[ "$(grep -c '^conncap watch -- every 0.3 s -- ' "$T/w.txt")" -eq 3 ] || h_fail "not 3 frames: $(cat "$T/w.txt")"
[ "$(grep -c '^SEMAPHORE  *HOLD/LIMIT  *WAITERS  *ACQ/s  *TMO/s  *WAIT p50  *p90  *p99  *FULL FOR$' "$T/w.txt")" -eq 3 ] || h_fail "header: $(cat "$T/w.txt")"
# first frame: no rates yet; wait percentiles over all time (2 grants, 1 timeout of >= 200 ms)
sed -n 3p "$T/w.txt" | grep -Eq '^api +2/2 +0 +- +- +[0-9]+ ms +[0-9]+ ms +[0-9]+ ms +[0-9.]+ (ms|s)$' || h_fail "first row: $(sed -n 3p "$T/w.txt")"
p99=$(sed -n 3p "$T/w.txt" | awk '{print $10}')
[ "$p99" -ge 200 ] || h_fail "p99 $p99 ms, but one wait took >= 200 ms"
# later frames: rates over the interval (nothing happened), no waits in it
sed -n 7p "$T/w.txt" | grep -Eq '^api +2/2 +0 +0\.0 +0\.0 +- +- +- +[0-9.]+ (ms|s)$' || h_fail "second row: $(sed -n 7p "$T/w.txt")"

# with NAME: the holders below the table
"$CLI" watch -c "$T/c.conf" --iterations 1 api >"$T/w1.txt" </dev/null || h_fail "watch api failed"
for p in $a $b; do grep -Eq "^[^ ]+ +$p  hold +[0-9]+  127\.0\.0\.1:$SRV_PORT " "$T/w1.txt" || h_fail "watch api: no holder $p: $(cat "$T/w1.txt")"; done

# a terminal: clear-screen frames, q quits, the terminal settings come back
python3 - "$CLI" "$T/c.conf" <<'PY' || h_fail "watch in a pty"
import os, pty, select, sys, termios, time
cli, conf = sys.argv[1:3]
pid, fd = pty.fork()
if pid == 0:
    # stty afterwards shows whether watch gave the terminal its settings back
    os.execv("/bin/sh", ["sh", "-c", '"$0" watch -c "$1" --interval 0.2; echo "rc=$?"; stty -a', cli, conf])
out, end = b"", time.time() + 20
def read_until(pred):
    global out
    while not pred() and time.time() < end:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
read_until(lambda: out.count(b"\033[H\033[2J") >= 2 and b"api" in out)
lflag = termios.tcgetattr(fd)[3]
assert not lflag & (termios.ICANON | termios.ECHO), "the terminal is not in raw mode while watching"
assert out.count(b"\033[H\033[2J") >= 2, ("no refreshed frames", out[-500:])
assert b"\033[?25l" in out, "cursor not hidden"
os.write(fd, b"q")
t0 = time.time()
while time.time() < end:
    p, st = os.waitpid(pid, os.WNOHANG)
    if p:
        break
    read_until(lambda: True)
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    raise AssertionError("q did not quit")
assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
while select.select([fd], [], [], 0.5)[0]:   # what it wrote before exiting
    try:
        d = os.read(fd, 65536)
    except OSError:
        break
    if not d:
        break
    out += d
tail = out[out.rfind(b"\033[?25h"):] if b"\033[?25h" in out else b""
assert tail, ("cursor not shown again", out[-200:])
assert b"rc=0" in tail, ("exit status after q", tail)
words = tail.replace(b";", b" ").split()
assert b"icanon" in words and b"echo" in words, ("terminal settings not restored", tail)
print("quit %.2f s after q" % (time.time() - t0), file=sys.stderr)
PY

# Ctrl-C (SIGINT) and SIGTERM end it with exit 0
for sig in INT TERM; do
    "$CLI" watch -c "$T/c.conf" --interval 0.2 >"$T/w2.txt" </dev/null &
    w=$!
    WAIT_S=10 h_wait_for grep -q '^api ' "$T/w2.txt" || h_fail "watch printed nothing"
    kill -$sig $w
    wait $w; rc=$?
    [ $rc -eq 0 ] || h_fail "watch: exit $rc after SIG$sig"
done
"$CLI" watch -c "$T/c.conf" --interval 0 --iterations 1 >/dev/null 2>&1 && h_fail "--interval 0 accepted"
"$CLI" watch -c "$T/c.conf" --iterations 1 nosuch >/dev/null 2>&1; [ $? -eq 2 ] || h_fail "unknown NAME not exit 2"
kill $a $b
echo ok
