#!/usr/bin/env python3
"""pyloop.py -- a long-running client for the ops tests: THREADS threads connect again and again.

pyloop.py HOST TARGETFILE STOPFILE [--threads N]
Each thread, until STOPFILE exists: reads the port to use from TARGETFILE
(re-read every time, so a test can switch servers while the program runs),
connects, sends one HTTP request, reads the reply until the server closes,
closes. A failed connect (e.g. ETIMEDOUT: no permit in time) is counted and
retried after 50 ms. Prints "ok N failed N" at the end; exit 0.
"""
import argparse, os, socket, sys, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("host")
ap.add_argument("targetfile")
ap.add_argument("stopfile")
ap.add_argument("--threads", type=int, default=6)
a = ap.parse_args()
lock = threading.Lock()
counts = {"ok": 0, "failed": 0}


def loop():
    while not os.path.exists(a.stopfile):
        try:
            port = int(open(a.targetfile).read().strip())
            s = socket.create_connection((a.host, port))
        except (OSError, ValueError) as e:
            print("connect failed: %r" % e, file=sys.stderr, flush=True)
            with lock:
                counts["failed"] += 1
            time.sleep(0.05)
            continue
        try:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            while s.recv(4096):
                pass
        except OSError:
            pass
        s.close()
        with lock:
            counts["ok"] += 1


ts = [threading.Thread(target=loop) for _ in range(a.threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("ok %d failed %d" % (counts["ok"], counts["failed"]))
