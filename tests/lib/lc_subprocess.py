#!/usr/bin/env python3
"""lc_subprocess.py PORT -- python3 holding sockets while it starts subprocesses.

Speaks the step protocol of tests/lib/lifecycle.sh ("@NAME N", then one line
on stdin). subprocess closes the inherited descriptors in the child with
close_range (close_fds=True); with pass_fds a child inherits a socket and
closes it; a fork child closes its copy and connects on its own; none of
them may give back the parent's permits.
"""
import os, socket, subprocess, sys

port = int(sys.argv[1])


def step(name, n):
    print("@%s %d" % (name, n), flush=True)
    if not sys.stdin.readline().startswith("ok"):
        sys.exit(1)


a = socket.create_connection(("127.0.0.1", port))
b = socket.create_connection(("127.0.0.1", port))
step("two", 2)
subprocess.run(["true"], check=True)                       # close_fds: close_range in the child
step("after-child", 2)
subprocess.run(["sh", "-c", "exec %d>&-; sleep 0.2" % a.fileno()], pass_fds=[a.fileno()], check=True)
step("after-child-closed-copy", 2)
subprocess.run([sys.executable, "-c", "import socket,sys; s=socket.socket(fileno=%d); s.close()" % b.fileno()],
               pass_fds=[b.fileno()], check=True)
step("after-python-child", 2)
pid = os.fork()
if pid == 0:
    os.close(a.fileno())                                   # the child's copy only
    c = socket.create_connection(("127.0.0.1", port))      # its own permit
    c.close()
    os._exit(0)
os.waitpid(pid, 0)
step("after-fork-child", 2)
a.close()
step("a-closed", 1)
b.close()
step("closed", 0)
