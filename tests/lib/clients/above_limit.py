#!/usr/bin/env python3
"""above_limit.py -- a non-blocking connect on a number at or above the program's own RLIMIT_NOFILE.

Usage: above_limit.py PORT room|noroom
Holds the one permit with a blocking connect, makes socket number 40,
registers it in an epoll set (before connect(), as nginx does), lowers the
soft limit to 30 ("room": the hard limit as it is; "noroom": the hard one
too), then connects 40 non-blocking. "room": releases the permit after
0.3 s and waits up to 10 s for 40 to be reported writable. Then closes 40
and waits up to 3 s for no other descriptor of the process to refer to its
socket. Prints one line:
"connect ERR done ERR|ERR/ENOTCONN|- same-file N events-after-close K"
(done: SO_ERROR once writable, /ENOTCONN when getpeername says it is not
connected; same-file: the descriptors still referring to the closed socket;
events-after-close: what the epoll set reports for the closed number).
"""
import errno, os, resource, select, socket, sys, time

port, mode = int(sys.argv[1]), sys.argv[2]
hold = socket.create_connection(("127.0.0.1", port))
s = socket.socket()
os.dup2(s.fileno(), 40)
s.close()
ino = os.fstat(40).st_ino
ep = select.epoll()
ep.register(40, select.EPOLLOUT)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (30, hard if mode == "room" else 30))
ss = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0, 40)
ss.setblocking(False)
err = ss.connect_ex(("127.0.0.1", port))
name = lambda e: errno.errorcode.get(e, str(e))
done = "-"
if mode == "room":
    time.sleep(0.3)
    hold.close()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if ep.poll(0.5):
            done = name(ss.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
            try:
                ss.getpeername()
            except OSError as e:
                done = done + "/" + name(e.errno)  # writable, but not connected
            break
ss.detach()
os.close(40)


def same_file():
    n = 0
    for f in os.listdir("/proc/self/fd"):
        try:
            n += os.fstat(int(f)).st_ino == ino
        except OSError:
            pass
    return n


end = time.monotonic() + 3
while same_file() and time.monotonic() < end:
    time.sleep(0.05)
print("connect", name(err), "done", done, "same-file", same_file(), "events-after-close", len(ep.poll(0.2)))
