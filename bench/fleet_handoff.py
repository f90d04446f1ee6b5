#!/usr/bin/env python3
"""fleet_handoff.py -- where each hand-off's time goes in the fleet row, from the kernel's own trace.

Record the row with the scheduler's wake-ups and a few syscalls, then read it:
  EV="-e sched:sched_wakeup -e syscalls:sys_exit_poll -e syscalls:sys_exit_recvfrom
      -e syscalls:sys_exit_read -e syscalls:sys_enter_connect -e syscalls:sys_exit_connect
      -e syscalls:sys_enter_sendto -e syscalls:sys_enter_clock_nanosleep
      -e syscalls:sys_exit_clock_nanosleep"
  FLEET_PERF=/tmp/f.data FLEET_PERF_ARGS="$EV" BUILD=build bash bench/scale.sh fleet
  perf script -i /tmp/f.data -F comm,pid,tid,time,event,trace > /tmp/f.txt
  python3 bench/fleet_handoff.py /tmp/f.txt
Each real connect of a client (connloop's children, comm "exe"; an AF_INET
connect) is tied to the last time redis-server woke a thread of that process
within 20 ms before it (the BLPOP reply that carried its grant), then followed
to its release (the first sendto after its 5 ms nanosleep). Segments: the woken
thread running; from there to the real connect (the waker -> waiting-thread
hop when the waker read the reply); the connect; the program's sleep; the
rest up to the release; and the whole cycle. Tracing slows the row (~10-20%).
"""
import sys, re, collections
pat = re.compile(r'^\s*(\S.*?)\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)$')
ev = []
for line in open(sys.argv[1]):
    m = pat.match(line)
    if m:
        comm, pid, tid, t, e, rest = m.groups()
        ev.append((float(t) * 1000, comm, int(pid), int(tid), e, rest))
ev.sort(key=lambda x: x[0])
redis = {p for (_, c, p, _, _, _) in ev if c == 'redis-server'}
mains = {p for (_, c, p, tid, _, _) in ev if c == 'exe' and p == tid}
owner = {tid: p for _, c, p, tid, _, _ in ev}
last = {}   # pid -> [wake t, woken tid, run t]
mainwake = {}  # pid -> last time main was woken (any waker), its run
cur = {}
seg = collections.defaultdict(list)
for t, c, p, tid, e, r in ev:
    if e == 'sched:sched_wakeup':
        w = int(re.search(r'pid=(\d+)', r).group(1))
        if w in owner and owner[w] in mains:
            if p in redis:
                last[owner[w]] = [t, w, None]
            if w == owner[w]:
                mainwake[w] = [t, None]
        continue
    if p not in mains: continue
    if e.startswith('syscalls:sys_exit'):
        if p in last and last[p][1] == tid and last[p][2] is None: last[p][2] = t
        if tid == p and p in mainwake and mainwake[p][1] is None: mainwake[p][1] = t
    if tid != p: continue
    s = cur.setdefault(p, {})
    if e == 'syscalls:sys_enter_connect' and 'addrlen: 0x00000010' in r and p in last and last[p][2] is not None and t - last[p][0] < 20:
        s.clear(); s['w'], s['wt'], s['run'] = last[p]; s['c'] = t
        s['mw'] = mainwake.get(p, [None, None])
    elif e == 'syscalls:sys_exit_connect' and 'c' in s and 'ce' not in s: s['ce'] = t
    elif e == 'syscalls:sys_enter_clock_nanosleep' and 'ce' in s: s['ns'] = t
    elif e == 'syscalls:sys_exit_clock_nanosleep' and 'ns' in s: s['nx'] = t
    elif e == 'syscalls:sys_enter_sendto' and 'nx' in s:
        hop = s['wt'] != p
        seg['grants read by the waker thread (share)'].append(1 if hop else 0)
        seg['Redis wakes the BLPOP reader -> it runs'].append(s['run'] - s['w'])
        if hop and s['mw'][1] is not None and s['mw'][0] >= s['w']:
            seg['  waker kicks -> the waiting thread runs'].append(s['mw'][1] - s['mw'][0])
        seg['reader runs -> real connect() (shim work, hop)'].append(s['c'] - s['run'])
        seg['real connect syscall'].append(s['ce'] - s['c'])
        seg['nanosleep 5 ms (the program)'].append(s['nx'] - s['ns'])
        seg['connect return -> .. -> release sent, less the sleep'].append(t - s['ce'] - (s['nx'] - s['ns']))
        seg['cycle: Redis wake-up -> release sent'].append(t - s['w'])
        s.clear()
def q(v, f): v = sorted(v); return v[min(len(v) - 1, int(len(v) * f))]
print("%-54s %5s %7s %7s %7s" % ('segment (ms)', 'n', 'p50', 'p90', 'mean'))
for k, v in seg.items():
    print("%-54s %5d %7.3f %7.3f %7.3f" % (k, len(v), q(v, .5), q(v, .9), sum(v) / len(v)))
for k in ['connect return -> .. -> release sent, less the sleep', 'cycle: Redis wake-up -> release sent']:
    v = sorted(seg[k])
    if v:
        print('%s: p99 %.3f, max %.3f' % (k, q(v, .99), v[-1]))
