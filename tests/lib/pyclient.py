#!/usr/bin/env python3
"""pyclient.py -- a plain Python TCP client for the integration tests.

pyclient.py HOST PORT [--hold MS] [--expect-errno NAME] [--family 4|6]
Connects, sends one HTTP request, reads the reply, holds the socket open
HOLD ms, closes. Exit 0 on success (or when the connect failed with the
expected errno), 3 on another failure; prints the errno name on failure.
"""
import argparse, errno, socket, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("host")
ap.add_argument("port", type=int)
ap.add_argument("--hold", type=int, default=0)
ap.add_argument("--expect-errno")
a = ap.parse_args()
try:
    s = socket.create_connection((a.host, a.port))
except OSError as e:
    name = errno.errorcode.get(e.errno, str(e.errno))
    print(name)
    sys.exit(0 if a.expect_errno == name else 3)
if a.expect_errno:
    print("connected")
    sys.exit(3)
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
data = b""
while True:
    d = s.recv(4096)
    if not d:
        break
    data += d
if a.hold:
    time.sleep(a.hold / 1000.0)
s.close()
sys.exit(0 if data.startswith(b"HTTP/1.0 200") else 3)
