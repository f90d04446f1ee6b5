# wait_waker_fd.sh -- a program that puts another file (dup2 of a pipe) on the number of the shim's
# blocking Redis connection (the waiters' waker, in BLPOP for up to 30 s; the higher of its two), on the
# other one, or closes both, while 300 non-blocking connects
# are queued at limit 3: the waker finds out within a second (its blocked read looks whether its number
# is still its socket), connects again, and the queue goes on. All 300 complete in seconds, the cap held,
# the program's pipe untouched. The old code's waker slept in poll() on a socket no number referred to
# for the rest of its block: 35 s with nothing granted (a tester's dup2 of a pipe: 38.6 s for 300).
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 30
h_conf "$T/c.conf" api 3 60000 120000 "127.0.0.1:$SRV_PORT"
cat >"$T/p.py" <<'PY'
import os, select, socket, subprocess, sys, time
port, how = int(sys.argv[1]), sys.argv[2]
socks = {}
for i in range(300):
    s = socket.socket(); s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    socks[s.fileno()] = s
# (at once: the waker is in its BLPOP, whose 30 s the old code slept out)
# the shim's Redis connections: this process's Unix stream sockets (ss names their descriptors)
out = subprocess.run(["ss", "-xp"], capture_output=True, text=True).stdout
mine = sorted({int(p.split(")")[0].split(",")[0]) for line in out.splitlines()
               if "pid=%d," % os.getpid() in line and "u_str" in line for p in line.split("fd=")[1:]})
print("shim-fds", len(mine), flush=True)
r, w = os.pipe()   # empty: the old waker, woken on it, would have found it readable and looked again
for f in mine if how == "close" else mine[-1:] if how == "dup2-last" else mine[:1]:
    if how == "close":
        os.close(f)
    else:
        os.dup2(r, f)
t0 = time.monotonic()
ep = select.epoll(); state = {}; ok = 0
for fd in socks:
    ep.register(fd, select.EPOLLOUT)
while socks and time.monotonic() - t0 < 60:
    for fd, ev in ep.poll(0.5):
        s = socks[fd]
        if fd not in state:
            s.send(b"GET / HTTP/1.0\r\n\r\n"); state[fd] = b""; ep.modify(fd, select.EPOLLIN)
        else:
            d = s.recv(4096); state[fd] += d
            if not d:
                ok += state[fd].startswith(b"HTTP/1.0 200"); ep.unregister(fd); socks.pop(fd).close()
os.write(w, b"mine")  # the program's pipe is still on its numbers, and nobody read it
os.set_blocking(r, False)
print("ok", ok, "seconds %.1f" % (time.monotonic() - t0), "pipe", os.read(r, 100).decode(), flush=True)
PY
for how in dup2-last dup2-first close; do
    h_server_start 30
    h_conf "$T/c.conf" api 3 60000 120000 "127.0.0.1:$SRV_PORT"
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" timeout 90 python3 "$T/p.py" "$SRV_PORT" $how >"$T/$how.out" 2>"$T/$how.err"
    read -r _ ok _ secs _ pipe < <(grep '^ok' "$T/$how.out")
    h_note "$how of the shim's $(sed -n 's/^shim-fds //p' "$T/$how.out") Redis descriptors: $ok of 300 in $secs s; the server saw at most $(h_server_stat max)"
    [ "${ok:-0}" -eq 300 ] || h_fail "$how: ${ok:-0} of 300 completed: $(cat "$T/$how.out" "$T/$how.err" | tail -n 5)"
    [ "${secs%.*}" -lt 20 ] || h_fail "$how: 300 took $secs s: the waker slept on a socket the program had replaced"
    [ "$how" = close ] || [ "$pipe" = mine ] || h_fail "$how: the program's pipe was read by the shim: '$pipe'"
    [ "$(h_server_stat max)" -le 3 ] || h_fail "$how: the server saw $(h_server_stat max) at once, limit 3"
    WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "$how: holders left in Redis"
done
echo ok
