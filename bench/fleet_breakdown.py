#!/usr/bin/env python3
"""fleet_breakdown.py -- where the fleet row's Redis work and idle permits go, from a MONITOR stream.

Usage: FLEET_MONITOR=/tmp/mon.txt FLEET_ITERS=10 bash bench/scale.sh fleet
       python3 bench/fleet_breakdown.py /tmp/mon.txt
MONITOR shows each command when Redis runs it, those a script runs as
"[db lua]" right after it; so a script's outcome is read from its calls:
an acquire (10-12 keys, or 4 for its short call, the second :limit) granted
makes a ZADD on :holders (a short call that did not grant answered 12, and the
full call followed), a release (7-10 keys, the second :stats) that removed a holder
a HINCRBY released; a wake-up is a LPUSH "w" on a :wake: list, a grant by a
release a LPUSH "g" (the waiter holds its permit from then on). Prints, per connect: the commands clients sent by kind,
acquires refused per grant, pokes (a client's own LPUSH), wake-ups pushed
and how many went to a waiter that already had one it had not used yet (an
acquire of that holder not yet run: two wake-ups merged into one, a freed
permit left for the hand-on of the next grant); the hand-off (a wake-up
pushed -> that holder's next acquire), the holders' hold (grant -> release),
the mean permits held, and the permit-seconds free while tickets wait.
MONITOR slows Redis down: the times are of that slower run.
"""
import collections, re, statistics, sys

QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
LINE = re.compile(r'^(\S+) \[\d+ ([^\]]+)\] (.*)$')


def parse(path):
    """Top-level commands (dicts: ts, cmd, args, inner = the script's calls)."""
    events = []
    for line in open(path, errors="replace"):
        m = LINE.match(line.rstrip("\n"))
        if not m:
            continue
        args = QUOTED.findall(m.group(3))
        if not args:
            continue
        ts, who = float(m.group(1)), m.group(2)
        if who == "lua":
            if events:
                events[-1]["inner"].append((ts, args[0].upper(), args[1:]))
        elif args[0].upper() not in ("INFO", "CONFIG", "MONITOR"):
            events.append({"ts": ts, "cmd": args[0].upper(), "args": args[1:], "inner": []})
    return events


def classify(e):
    """acquire / release (with e['ok']: granted / removed), or the command."""
    if e["cmd"] in ("EVALSHA", "EVAL", "FCALL") and len(e["args"]) > 1:
        if not e["inner"]:
            return "script not run (library or script missing)"
        calls = e["inner"]
        nk = int(e["args"][1]) if e["args"][1].isdigit() else 0
        second = e["args"][3] if nk > 1 else ""
        if (nk >= 10 or nk == 4) and second.endswith(":limit"):
            e["holder"] = e["args"][2 + nk]
            e["ok"] = any(c[1] == "ZADD" and c[2][0].endswith(":holders") for c in calls)
            if nk == 4 and not e["ok"]:
                return "acquire's short call, answered 12 (the full call follows)"
            return "acquire"
        if 7 <= nk <= 10 and second.endswith(":stats"):
            e["holder"] = e["args"][2 + nk]
            e["ok"] = any(c[1] == "HINCRBY" and c[2][1:2] == ["released"] for c in calls)
            # the waiters this release granted a permit (a 'g' token)
            e["granted"] = [c[2][0].split(":wake:", 1)[1] for c in calls
                            if c[1] == "LPUSH" and ":wake:" in c[2][0] and c[2][1:2] == ["g"]]
            return "release"
    return e["cmd"]


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


def main(path):
    events = parse(path)
    kinds = collections.Counter(classify(e) for e in events)
    grants = sum(1 for e in events if e["cmd"] != "BLPOP" and e.get("ok") and classify(e) == "acquire")
    by_release = sum(len(e.get("granted", ())) for e in events if classify(e) == "release")
    refused = kinds["acquire"] - grants
    grants += by_release
    n = max(grants, 1)
    print("connects (grants) %d; per connect: %s" % (grants, ", ".join("%s %.2f" % (k, v / n) for k, v in kinds.most_common())))
    print("acquires refused per grant %.2f; pokes (a client's LPUSH) per connect %.2f" % (refused / n, kinds["LPUSH"] / n))
    print("grants made by a release (a 'g' token: no acquire of the waiter) per connect %.2f" % (by_release / n))

    pending, merged, pushed = {}, collections.Counter(), collections.Counter()
    next_acq = collections.defaultdict(list)
    for e in events:
        if classify(e) == "acquire":
            next_acq[e["holder"]].append(e["ts"])
    handoff = []
    for e in events:
        kind = classify(e)
        if kind == "acquire":
            pending.pop(e["holder"], None)
        for ts, cmd, a in e["inner"]:
            if cmd == "LPUSH" and ":wake:" in a[0] and a[1:2] == ["w"]:
                h = a[0].split(":wake:", 1)[1]
                pushed[kind] += 1
                merged[kind] += h in pending
                pending[h] = ts
                later = [t for t in next_acq[h] if t >= ts]
                if later:
                    handoff.append((later[0] - ts) * 1000)
    print("wake-ups pushed per connect: %s; to a waiter with one unused already: %s" % (
        ", ".join("by %s %.2f" % (k, v / n) for k, v in pushed.items()),
        ", ".join("by %s %.0f%%" % (k, 100.0 * merged[k] / v) for k, v in pushed.items())))
    if handoff:
        print("hand-off, wake-up pushed -> its acquire: p50 %.2f p90 %.2f p99 %.2f mean %.2f ms" % (
            pct(handoff, .5), pct(handoff, .9), pct(handoff, .99), statistics.mean(handoff)))

    granted_at, holds = {}, []
    held, queue, last, area, idle = 0, set(), None, 0.0, 0.0
    for e in events:
        kind = classify(e)
        if last is not None:
            area += held * (e["ts"] - last)
            if queue and held < 10:
                idle += (10 - held) * (e["ts"] - last)
        last = e["ts"]
        for ts, cmd, a in e["inner"]:
            if cmd == "ZADD" and a[0].endswith(":queue"):
                queue.add(a[-1])
            elif cmd == "ZREM" and a[0].endswith(":queue"):
                queue.difference_update(a[1:])
        if kind == "acquire" and e["ok"] and e["holder"] not in granted_at:
            held += 1
            granted_at[e["holder"]] = e["ts"]
        elif kind == "release" and e["ok"]:
            held -= 1
            if e["holder"] in granted_at:
                holds.append((e["ts"] - granted_at.pop(e["holder"])) * 1000)
        for w in e.get("granted", ()) if kind == "release" else ():
            held += 1
            granted_at[w] = e["ts"]
    span = events[-1]["ts"] - events[0]["ts"] if events else 0
    if holds and span > 0:
        print("hold, grant -> release: p50 %.2f p90 %.2f mean %.2f ms; permits held on average %.2f of 10; "
              "permit-seconds free while tickets wait %.2f of %.2f" % (
                  pct(holds, .5), pct(holds, .9), statistics.mean(holds), area / span, idle, 10 * span))


if __name__ == "__main__":
    main(sys.argv[1])
