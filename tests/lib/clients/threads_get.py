#!/usr/bin/python3
"""threads_get.py -- THREADS threads make N GETs, each on a connection of its own.

Usage: /usr/bin/python3 threads_get.py requests|socket PORT N THREADS
"requests": requests.get(url, timeout=30) (a new connection each, as a
script without a Session makes them); "socket": socket.create_connection(
(host, port), timeout=60), then an HTTP/1.0 GET read to the end. Both
connects carry a timeout, so Python connects non-blocking and polls. Prints
one line: "ok K failed F codes ERRNO=n,... elapsed_ms E slowest_ms S".
"""
import argparse, errno, socket, threading, time
from concurrent.futures import ThreadPoolExecutor

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=("requests", "socket"))
ap.add_argument("port", type=int)
ap.add_argument("n", type=int)
ap.add_argument("threads", type=int)
a = ap.parse_args()
if a.mode == "requests":
    import requests
lock = threading.Lock()
codes, res = {}, {"ok": 0, "failed": 0, "slowest": 0.0}


def errno_of(e):
    """The errno of the OSError somewhere in E's chain, by name."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno:
            return errno.errorcode.get(e.errno, str(e.errno))
        e = e.__cause__ or e.__context__ or (e.args[0] if e.args and isinstance(e.args[0], BaseException) else None)
        if e is not None and not isinstance(e, BaseException):
            e = getattr(e, "reason", None)
    return "unknown"


def by_requests():
    r = requests.get("http://127.0.0.1:%d/" % a.port, timeout=30)
    return r.status_code == 200 and r.text == "ok\n", "HTTP%d" % r.status_code


def by_socket():
    s = socket.create_connection(("127.0.0.1", a.port), timeout=60)
    try:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            data += d
    finally:
        s.close()
    return data.startswith(b"HTTP/1.0 200"), "bad-reply"


def one(_):
    t = time.monotonic()
    try:
        good, name = by_requests() if a.mode == "requests" else by_socket()
    except Exception as e:  # requests' errors and OSError alike
        good, name = False, errno_of(e)
    with lock:
        res["ok" if good else "failed"] += 1
        if not good:
            codes[name] = codes.get(name, 0) + 1
        res["slowest"] = max(res["slowest"], time.monotonic() - t)


t0 = time.monotonic()
with ThreadPoolExecutor(a.threads) as ex:
    list(ex.map(one, range(a.n)))
c = ",".join("%s=%d" % kv for kv in sorted(codes.items())) or "-"
print("ok %d failed %d codes %s elapsed_ms %d slowest_ms %d" % (
    res["ok"], res["failed"], c, (time.monotonic() - t0) * 1000, res["slowest"] * 1000))
