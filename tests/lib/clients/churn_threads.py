#!/usr/bin/env python3
"""churn_threads.py -- T threads, each connecting, reading to EOF and closing, again and again for S seconds.

Usage: churn_threads.py PORT T S
Prints one line: "ok K failed F codes NAME=n,...|-".
"""
import errno, socket, sys, threading, time

port, nthreads, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + secs
res, codes, lock = {"ok": 0, "failed": 0}, {}, threading.Lock()


def worker():
    while time.monotonic() < end:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            while s.recv(4096):
                pass
            s.close()
            with lock:
                res["ok"] += 1
        except OSError as e:
            name = errno.errorcode.get(e.errno, type(e).__name__)
            with lock:
                res["failed"] += 1
                codes[name] = codes.get(name, 0) + 1


ts = [threading.Thread(target=worker) for _ in range(nthreads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("ok", res["ok"], "failed", res["failed"], "codes", ",".join("%s=%d" % kv for kv in codes.items()) or "-")
