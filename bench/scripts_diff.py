#!/usr/bin/env python3
"""scripts_diff.py -- differential run: the same random operations through two versions of lua/ on one Redis.

Usage: scripts_diff.py SOCK OLD_DIR NEW_DIR [STEPS] [SEED]
OLD_DIR and NEW_DIR hold acquire.lua, release.lua and renew.lua, called
with the arguments of lua/ since fb9143e (acquire's and release's reordered
ones) and acquire's 11 keys (the failover window's key added after 9d215b1:
a script that declares 10 ignores the 11th), each version with its keys in
the order its own header gives them (acquire.lua's queue key moved to 4th
after 1542077, for its short call, which the new version makes first
for most acquires that may take it, then the full call if it answers 12,
as core/sem.c does). Earlier runs compared main at
b49f650 with the reordered arguments; the latest, lua/ at 9d215b1 with the
failover window (no window is ever opened here: outside a failover the
scripts must behave the same). Each step
runs in db 0 with the old scripts and in db 1 with the new ones: acquires
(lease 30 s, or 5 ms, ended by the next step 12 ms later; trying once or
queueing; sometimes leaving the queue), releases and renews of a pool of
holders on one semaphore of limit 3. After each step the replies (granted,
limit; retry_ms and wake_ms as "none / some") and the state (the live
holders and queue members, the stats counters as the CLI reads them) must
be the same. Not the count, nor the reclaimed counter: since the short call
of 5 keys, an ended lease below the limit is swept by a later call. What the new scripts do differently on purpose is not
compared: which waiters get a wake-up token; the gauges (limit, full_since,
full_limit); the acquire times (since: the new scripts write them at the
first renewal only); the raw histogram (a grant that never waited is only
in acquired now: compared after the CLI's expansion); nor the state right after a
step that granted a 5 ms lease (its key's TTL may end between the two reads). Prints the number of steps and
exits 1 at the first difference.
"""
import os, random, re, socket, sys, time


class Redis:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rb")

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()[:-2]
        t, rest = line[:1], line[1:]
        if t == b"+": return rest.decode()
        if t == b"-": raise RuntimeError(rest.decode())
        if t == b":": return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0: return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("bad reply %r" % line)


def keys(*suffixes):
    return ["d:{s}:" + x for x in suffixes]


def header_keys(path, n):
    """The first N keys of the script at PATH in the order its header names them ("-- KEYS[i] <prefix>{name}:x")."""
    found = {}
    for m in re.finditer(r"KEYS\[(\d+)\] *<prefix>\{name\}:([a-z]+)", open(path).read()):
        found.setdefault(int(m.group(1)), m.group(2))
    return keys(*[found[i] for i in range(1, min(n, len(found)) + 1)])


# the keys as state() reads them; each version is called with its own order
ACQ = keys("holders", "limit", "stats", "since", "waiters", "audit", "queue", "qexp", "rate", "epoch", "failover")


def cli_view(st):
    """The counters as cli/ops.c reads them: grants that never waited added as waits of 0 ms."""
    st = {k: int(v) for k, v in st.items() if k not in ("limit", "full_since", "full_limit", "queue_full", "reclaimed")}
    inst = st.get("acquired", 0) - max(st.get("wait_count", 0) - st.get("timed_out", 0), 0)
    if inst > 0:
        st["wait_count"] = st.get("wait_count", 0) + inst
        st["wait_le_1"] = st.get("wait_le_1", 0) + inst
        st.setdefault("wait_sum_ms", 0)
    return st


def state(r):
    t = r.call("TIME")
    now = int(t[0]) * 1000 + int(t[1]) // 1000
    h = sorted(r.call("ZRANGEBYSCORE", ACQ[0], "(%d" % now, "+inf"))  # live holders: ended leases are swept later now
    q = sorted(r.call("ZRANGE", ACQ[6], 0, -1))
    st = r.call("HGETALL", ACQ[2]) or []
    return h, q, cli_view(dict(zip(st[::2], st[1::2])))


def main():
    sock, old_dir, new_dir = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    rnd = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    pick = random.Random(rnd.random())  # which acquires go short: apart, so the operations stay those of SEED
    rs = [Redis(sock), Redis(sock)]
    rs[1].call("SELECT", 1)
    sha, order, has_short = [], [], []
    for d in (old_dir, new_dir):
        sha.append({n: rs[0].call("SCRIPT", "LOAD", open(os.path.join(d, n + ".lua")).read())
                    for n in ("acquire", "release", "renew")})
        m = re.search(r"The short call \(KEYS\[1\.\.(\d+)\]", open(os.path.join(d, "acquire.lua")).read())
        has_short.append(int(m.group(1)) if m else 0)
        order.append({"acquire": header_keys(os.path.join(d, "acquire.lua"), 11),
                      "release": header_keys(os.path.join(d, "release.lua"), 10),
                      "renew": header_keys(os.path.join(d, "renew.lua"), 3)})
    for r in rs:
        r.call("FLUSHDB")
    pool = ["h%d" % i for i in range(10)]
    for step in range(steps):
        time.sleep(0.012)  # a 5 ms lease of the last step has ended for both versions
        op = rnd.random()
        h = rnd.choice(pool)
        short = False
        if op < 0.5:
            lease = rnd.choice(["30000", "30000", "5"])
            short = lease == "5"
            ttl = rnd.choice(["0", "5000"])
            flags = rnd.choice(["", "", "l"])
            a = [h, lease, "3", ttl, ttl, "0", flags]
            calls = [("acquire", None, a), ("acquire", None, a)]
        elif op < 0.85:
            a = [h, "3", rnd.choice(["", "r"])]
            calls = [("release", None, a), ("release", None, a)]
        else:
            ids = rnd.sample(pool, rnd.randint(1, 5))
            a = ["30000", rnd.choice(["0", "1"])] + ids
            calls = [("renew", None, a)] * 2
        replies = []
        for v in (0, 1):
            name, _, a = calls[v]
            k = order[v][name]
            rep = None
            if name == "acquire" and has_short[v] and a[6] == "" and pick.random() < 0.7:
                # the short call as sem.c makes it: 12 says make the full one
                rep = rs[v].call("EVALSHA", sha[v][name], has_short[v], *k[:has_short[v]], *a[:3])
                if rep == 12:
                    rep = None
            if rep is None:
                rep = rs[v].call("EVALSHA", sha[v][name], len(k), *k, *a)
            if isinstance(rep, list):
                rep = rep + [0, -1] if len(rep) == 3 else rep  # a grant with nothing more to say
                rep = rep[:1] + rep[2:3] + ["retry" if rep[3] > 0 else "-", "wake" if rep[4] >= 0 else "-"]
            replies.append(rep)
        a, b = state(rs[0]), state(rs[1])
        # a 5 ms lease's key may expire (its TTL is two leases) between one
        # version's call and its state read on a loaded machine: its state
        # is compared at the next step
        if replies[0] != replies[1] or (a != b and not short):
            print("step %d: %s %s\n  old %r %r\n  new %r %r" % (step, calls[0][0], calls[0][2], replies[0], a,
                                                               replies[1], b))
            return 1
    print("%d steps, the same replies and state" % steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
