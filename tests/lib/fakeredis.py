#!/usr/bin/env python3
"""fakeredis.py -- a hostile stand-in for Redis: speaks just enough RESP to be talked to, then misbehaves.

Listens on 127.0.0.1 (a free port, written to PORTFILE) and counts the
connections accepted and the commands read; STATS (JSON, atomically
replaced) gets {"conns": N, "cmds": M} at every change. Every command gets
the MODE's answer:
  drip         an endless status line "+xxxx...", BYTES bytes every MS ms
               (a reply that never ends however long one waits)
  bigarray     "*2147483647\\r\\n", then ":1\\r\\n" elements as fast as the
               client reads them
  bigbulk      "$2000000000\\r\\n", then data as fast as the client reads it
  error        "-TEXT\\r\\n" (every command); with --close, the connection is
               closed after it (as Redis does for "max number of clients")
  wake         a real-looking conncap: SCRIPT LOAD gets the script's SHA1,
               the acquire script (EVALSHA, EVAL or FCALL with 12 keys, or its short call: 5) {0, 1, 1, 0, WAKE, 0, 0}
               (denied, wake up in WAKE ms), other scripts :0, BLPOP a nil
               array, anything else +OK
  deep         a reply nested DEPTH arrays deep, each of one element
  status       "+TEXT\\r\\n" (every command: a reply of the wrong type)
Usage: fakeredis.py --mode MODE --portfile F --stats F [--bytes N] [--ms N]
                    [--text TEXT] [--close] [--wake N] [--depth N]
"""
import argparse, hashlib, json, os, socket, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("--mode", required=True,
                choices=["drip", "bigarray", "bigbulk", "error", "wake", "deep", "status"])
ap.add_argument("--portfile", required=True)
ap.add_argument("--stats", required=True)
ap.add_argument("--bytes", type=int, default=1)
ap.add_argument("--ms", type=int, default=150)
ap.add_argument("--text", default="ERR max number of clients reached")
ap.add_argument("--close", action="store_true")
ap.add_argument("--wake", default="9223372036854775807")
ap.add_argument("--depth", type=int, default=100)
a = ap.parse_args()

lock = threading.Lock()
st = {"conns": 0, "cmds": 0}


def bump(k, by=1):
    with lock:
        st[k] += by
        tmp = a.stats + ".tmp"
        with open(tmp, "w") as f:
            json.dump(st, f)
        os.replace(tmp, a.stats)


def read_command(f):
    """One command (an array of bulk strings, or an inline line), or None at EOF."""
    line = f.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.split()
    args = []
    for _ in range(int(line[1:])):
        n = int(f.readline()[1:])
        args.append(f.read(n + 2)[:n])
    return args


def flood(c, head, unit):
    c.sendall(head)
    chunk = unit * (65536 // len(unit))
    while True:
        c.sendall(chunk)


def answer(c, args):
    cmd = args[0].upper() if args else b""
    if a.mode == "drip":
        c.sendall(b"+")
        while True:
            time.sleep(a.ms / 1000.0)
            c.sendall(b"x" * a.bytes)
    if a.mode == "bigarray":
        flood(c, b"*2147483647\r\n", b":1\r\n")
    if a.mode == "bigbulk":
        flood(c, b"$2000000000\r\n", b"x")
    if a.mode in ("error", "status"):
        c.sendall((b"-" if a.mode == "error" else b"+") + a.text.encode("utf-8", "surrogateescape") + b"\r\n")
        return not a.close
    if a.mode == "deep":
        c.sendall(b"*1\r\n" * a.depth + b":1\r\n")
        return True
    # wake
    if cmd == b"SCRIPT" and len(args) > 2:
        sha = hashlib.sha1(args[2]).hexdigest().encode()
        c.sendall(b"$40\r\n" + sha + b"\r\n")
    elif cmd in (b"EVALSHA", b"EVAL", b"FCALL") and args[2] in (b"12", b"5"):
        w = a.wake.encode()
        c.sendall(b"*7\r\n:0\r\n:1\r\n:1\r\n:0\r\n:" + w + b"\r\n:0\r\n:0\r\n")
    elif cmd in (b"EVALSHA", b"EVAL", b"FCALL"):
        c.sendall(b":0\r\n")
    elif cmd == b"BLPOP":
        c.sendall(b"*-1\r\n")
    else:
        c.sendall(b"+OK\r\n")
    return True


def serve(c):
    f = c.makefile("rb")
    try:
        while True:
            args = read_command(f)
            if args is None:
                break
            bump("cmds")
            if not answer(c, args):
                break
    except (OSError, ValueError, IndexError):
        pass
    finally:
        try:
            c.close()
        except OSError:
            pass


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(128)
bump("conns", 0)
with open(a.portfile + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.replace(a.portfile + ".tmp", a.portfile)
while True:
    conn, _ = s.accept()
    bump("conns")
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
