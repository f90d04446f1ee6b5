#!/usr/bin/env python3
"""measure.py -- runs a command and reports how long it took and its peak memory, with a leash.

The command is killed (SIGKILL) after --timeout seconds, or as soon as its
resident memory passes --rss-max-mb (so that a test of a runaway program
cannot take the machine down with it). Writes one line to REPORT:
  rc=N ms=N hwm_kb=N killed=none|timeout|memory
(rc: the exit status, or 128+signal). Its stdout and stderr are the command's.
Usage: measure.py --report FILE [--timeout S] [--rss-max-mb M] -- CMD ARGS...
"""
import argparse, resource, subprocess, time

ap = argparse.ArgumentParser()
ap.add_argument("--report", required=True)
ap.add_argument("--timeout", type=float, default=30)
ap.add_argument("--rss-max-mb", type=int, default=512)
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd


def status_kb(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


t0 = time.monotonic()
p = subprocess.Popen(cmd)
killed, hwm = "none", 0
while p.poll() is None:
    hwm = max(hwm, status_kb(p.pid, "VmHWM"))
    if status_kb(p.pid, "VmRSS") > a.rss_max_mb * 1024:
        killed = "memory"
    elif time.monotonic() - t0 > a.timeout:
        killed = "timeout"
    if killed != "none":
        p.kill()
        break
    time.sleep(0.01)
rc = p.wait()
ms = int((time.monotonic() - t0) * 1000)
hwm = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
with open(a.report, "w") as f:
    f.write("rc=%d ms=%d hwm_kb=%d killed=%s\n" % (rc if rc >= 0 else 128 - rc, ms, hwm, killed))
