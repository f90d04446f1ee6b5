#!/usr/bin/env python3
"""tryconnect.py HOST PORT -- connect and close at once; prints "ok" or the errno name; exit 0 / 1."""
import errno, socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    s.close()
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
    sys.exit(1)
