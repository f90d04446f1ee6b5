#!/usr/bin/env python3
"""countserver.py -- a local TCP server that counts concurrent connections.

Each connection is held HOLD ms (or until the peer closes), answered with a
small HTTP/1.0 response, and closed. The current, maximum and total counts are
written to STATS (JSON, atomically replaced) at every change. A connection
counts from its accept until the peer closed or the hold ended, whichever is
first: the count stops before the response goes out, because a client may close
(and hand its permit on) as soon as it has read it -- a count that stopped later
would see the next client's accept overlap a connection already closed. For the
same reason every accept first stops counting the connections whose peer has
closed (its FIN is in, nothing is left to read) before it counts its own: a
client that closes without waiting for the response (a bare connect, a killed
holder) hands its permit on at once, and under load the next connection is
accepted before the thread serving the closed one has read its FIN (or before
the closed one itself was accepted). A connection still counted at an accept
came before the new one and has not closed, so each count is of connections
open at once (when the new one came in); one that a client closes between the
new one's arrival and its accept (the accept's lag) is not counted with it. With
--keepalive it speaks HTTP/1.1 keep-alive instead: every request on a
connection is held HOLD ms and answered, and the connection counts from its
accept until the peer closes it (a client's idle pooled connection counts).
With
--log FILE, each accept appends a line "<CLOCK_MONOTONIC seconds>" to FILE.
The bound port is written to PORTFILE. Listens on 127.0.0.1 (--host: another
IPv4 address) and, with --v6, also on ::1 (same port).
Usage: countserver.py --hold MS --stats FILE --portfile FILE [--host A] [--v6] [--port N] [--log FILE] [--keepalive]
"""
import argparse, fcntl, json, os, select, socket, struct, termios, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("--hold", type=int, default=500)
ap.add_argument("--stats", required=True)
ap.add_argument("--portfile", required=True)
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--v6", action="store_true")
ap.add_argument("--host", default="127.0.0.1")  # the IPv4 address it listens on
ap.add_argument("--log")
ap.add_argument("--keepalive", action="store_true")
a = ap.parse_args()

lock = threading.Lock()
st = {"cur": 0, "max": 0, "total": 0}


def dump():
    tmp = a.stats + ".tmp"
    with open(tmp, "w") as f:
        json.dump(st, f)
    os.replace(tmp, a.stats)


def serve(c):
    def uncount():
        with lock:
            uncount_c(c)

    try:
        c.settimeout(a.hold / 1000.0)
        end = time.monotonic() + a.hold / 1000.0
        try:
            while time.monotonic() < end:
                d = c.recv(65536)
                if not d:
                    uncount()
                    break
                if b"\r\n\r\n" in d or b"\n" in d:
                    c.settimeout(max(0.001, end - time.monotonic()))
                    try:
                        while c.recv(65536):
                            pass
                        uncount()  # the peer closed
                    except OSError:
                        pass
                    break
        except OSError:
            pass
        rest = end - time.monotonic()
        if rest > 0 and c in live:
            time.sleep(rest)
        uncount()
        try:
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
            c.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    finally:
        uncount()
        c.close()


live = {}  # connections still counted: socket -> True (added and removed under lock)


def uncount_c(c):
    """Stops counting connection C (once). Under lock."""
    if live.pop(c, None):
        st["cur"] -= 1
        dump()


def peer_closed(c):
    """True when a read of C would end now: the peer's FIN is in and nothing
    is left to read, or the connection failed. Never waits (C may have a
    timeout, which a recv would wait on), never consumes anything."""
    try:
        p = select.poll()
        p.register(c, select.POLLRDHUP)
        ev = p.poll(0)
        if not ev:
            return False
        if ev[0][1] & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
            return True
        n = fcntl.ioctl(c, termios.FIONREAD, struct.pack("i", 0))
        return struct.unpack("i", n)[0] == 0
    except OSError:
        return True


def reap_closed():
    """Stops counting the connections whose peer has closed, so that a
    connection accepted after a client's close never overlaps it (its FIN
    arrived first, its serving thread may not have run yet). A connection
    leaves LIVE before its thread closes it, so none here is closed. Under
    lock."""
    for c in list(live):
        if peer_closed(c):
            uncount_c(c)


def serve_keepalive(c):
    """HTTP/1.1 keep-alive: each request held HOLD ms, then answered; counted
    until the peer's EOF (or an error)."""
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            buf = buf.split(b"\r\n\r\n", 1)[1]
            time.sleep(a.hold / 1000.0)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\nok\n")
    except OSError:
        pass
    finally:
        with lock:
            uncount_c(c)
        c.close()


def accept_loop(s):
    while True:
        c, _ = s.accept()
        t = time.monotonic()
        with lock:
            reap_closed()
            live[c] = True
            if a.log:
                with open(a.log, "a") as f:
                    f.write("%.6f\n" % t)
            st["cur"] += 1
            st["total"] += 1
            st["max"] = max(st["max"], st["cur"])
            dump()
        threading.Thread(target=serve_keepalive if a.keepalive else serve, args=(c,), daemon=True).start()


s4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s4.bind((a.host, a.port))
s4.listen(512)
port = s4.getsockname()[1]
socks = [s4]
if a.v6:
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s6.bind(("::1", port))
    s6.listen(512)
    socks.append(s6)
with lock:
    dump()
with open(a.portfile + ".tmp", "w") as f:
    f.write(str(port))
os.replace(a.portfile + ".tmp", a.portfile)
for s in socks[1:]:
    threading.Thread(target=accept_loop, args=(s,), daemon=True).start()
accept_loop(s4)
