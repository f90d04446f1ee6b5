#!/usr/bin/env python3
"""fleetserver.py -- a cheap TCP server that counts concurrent connections, for the fleet row.

tests/lib/countserver.py starts a thread per connection and rewrites its
stats file at every change: about 1.2 ms of CPU per connection, and its
accept queue overflows when a fleet of clients connects hundreds of times a
second (each overflow costs a client a 1 s SYN retransmission). This one is
a single thread on epoll: a connection counts from its accept until the peer
closes it (its EOF), and nothing is sent. Before a new connection is
counted, every counted one whose peer has closed is uncounted (MSG_PEEK),
so a client that closed (and handed its permit on) before the next one
connected never overlaps it, whatever order the events come in. The current,
maximum and total counts go to STATS (JSON, atomically replaced) when the
maximum changes, at most every 100 ms otherwise, and on SIGTERM.
Usage: fleetserver.py --stats FILE --portfile FILE
"""
import argparse, json, os, selectors, signal, socket, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--stats", required=True)
ap.add_argument("--portfile", required=True)
a = ap.parse_args()

st = {"cur": 0, "max": 0, "total": 0}
dirty, last_dump = False, 0.0


def dump():
    global dirty, last_dump
    tmp = a.stats + ".tmp"
    with open(tmp, "w") as f:
        json.dump(st, f)
    os.replace(tmp, a.stats)
    dirty, last_dump = False, time.monotonic()


def stop(*_):
    dump()
    sys.exit(0)


sel = selectors.DefaultSelector()
live = set()


def uncount(c):
    global dirty
    if c in live:
        live.discard(c)
        st["cur"] -= 1
        dirty = True
    sel.unregister(c)
    c.close()


def reap_closed():
    for c in list(live):
        try:
            if c.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                uncount(c)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            uncount(c)


def accept_all(s):
    global dirty
    while True:
        try:
            c, _ = s.accept()
        except (BlockingIOError, InterruptedError):
            return
        c.setblocking(False)
        reap_closed()
        live.add(c)
        sel.register(c, selectors.EVENT_READ)
        st["cur"] += 1
        st["total"] += 1
        dirty = True
        if st["cur"] > st["max"]:
            st["max"] = st["cur"]
            dump()


s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(4096)
s.setblocking(False)
sel.register(s, selectors.EVENT_READ)
signal.signal(signal.SIGTERM, stop)
dump()
with open(a.portfile + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.replace(a.portfile + ".tmp", a.portfile)
while True:
    events = sel.select(0.1)
    # EOFs first, then new connections
    for key, _ in events:
        c = key.fileobj
        if c is s:
            continue
        try:
            if c.recv(65536) == b"":
                uncount(c)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            uncount(c)
    if any(key.fileobj is s for key, _ in events):
        accept_all(s)
    if dirty and time.monotonic() - last_dump >= 0.1:
        dump()
