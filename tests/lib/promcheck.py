#!/usr/bin/env python3
"""promcheck.py -- checks a Prometheus text exposition (format 0.0.4) line by line.

promcheck.py FILE|- [--prefix conncap_] [--label semaphore] [--get SERIES]...
Checks every line: "# HELP name text" and "# TYPE name type" (at most once per
metric, TYPE before its samples, types counter|gauge|histogram|summary|untyped),
other "#" comments, blank lines, and samples "name{label="value",...} value
[timestamp]" with the name and label syntax, the escapes in label values
(\\\\, \\", \\n only) and float values. Families must not interleave; a series
(name + labels) appears once. Counters: name ends in _total, value >= 0.
Histograms: only NAME_bucket (with le), NAME_sum, NAME_count; per label set
the buckets are sorted by le, cumulative (never decreasing), end in
le="+Inf", and NAME_count equals the +Inf bucket. With --prefix every metric
name starts with it; with --label every sample except those of
PREFIXredis_up and PREFIXbuild_info carries that label. Each --get SERIES (e.g.
'conncap_holders{semaphore="api"}', labels in the order printed) prints its
value, one per line ("missing" if absent). Exit 0 valid, 1 invalid (errors
on stderr, each with its line number), 2 usage.
"""
import math, re, sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LNAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
LVALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(" + NAME + r")(\{(?:" + LNAME + "=" + LVALUE + r"(?:," + LNAME + "=" + LVALUE +
                    r")*,?)?\})? ([^ ]+)(?: (-?[0-9]+))?$")
LABEL = re.compile("(" + LNAME + ")=(" + LVALUE + ")")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_value(s):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    if not re.match(r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$", s):
        raise ValueError(s)
    return float(s)


def unescape(v):
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v[1:-1])


def family_of(name, types):
    """The family a sample name belongs to (histogram/summary suffixes)."""
    for suf in ("_bucket", "_sum", "_count"):
        if name.endswith(suf) and types.get(name[: -len(suf)]) in ("histogram", "summary"):
            return name[: -len(suf)]
    return name


def check(text, prefix=None, label=None):
    errs, types, helps, series, done = [], {}, {}, {}, set()
    hist = {}  # (family, labels without le) -> list of (le, value, line)
    counts = {}  # (family, labels) -> _count value
    current = None
    if text and not text.endswith("\n"):
        errs.append("last line: no final newline")
    for no, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1):
        def err(msg):
            errs.append("line %d: %s: %r" % (no, msg, line))
        if not line.strip():
            continue
        if line.startswith("#"):
            m = re.match(r"^# (HELP|TYPE) (" + NAME + r") (.*)$", line)
            if not m:
                if re.match(r"^# ?(HELP|TYPE)\b", line):
                    err("malformed HELP/TYPE line")
                continue
            kind, name, rest = m.groups()
            if name in done:
                err("%s for %s after its samples ended (families interleave)" % (kind, name))
            if kind == "TYPE":
                if rest not in TYPES:
                    err("unknown type %r" % rest)
                if name in types:
                    err("second TYPE for %s" % name)
                if any(family_of(s[0], {name: rest}) == name for s in series):
                    err("TYPE for %s after its samples" % name)
                types[name] = rest
            else:
                if name in helps:
                    err("second HELP for %s" % name)
                if not rest.strip():
                    err("empty HELP text")
                if re.search(r"\\[^\\n]", rest):
                    err("bad escape in HELP text")
                helps[name] = rest
            if current and current != name:
                done.add(current)
            current = name
            continue
        m = SAMPLE.match(line)
        if not m:
            err("not a sample line")
            continue
        name, lbl, val, _ts = m.groups()
        try:
            v = parse_value(val)
        except ValueError:
            err("bad value %r" % val)
            continue
        labels = tuple((k, unescape(x)) for k, x in LABEL.findall(lbl or ""))
        if len({k for k, _ in labels}) != len(labels):
            err("repeated label name")
        fam = family_of(name, types)
        if fam in done:
            err("sample of %s after its family ended (families interleave)" % fam)
        if current and current != fam:
            done.add(current)
        current = fam
        if (name, labels) in series:
            err("duplicate series")
        series[(name, labels)] = v
        t = types.get(fam, "untyped")
        if prefix and not name.startswith(prefix):
            err("name does not start with %s" % prefix)
        if label and prefix and name not in (prefix + "redis_up", prefix + "build_info") and label not in dict(labels):
            err("no %s label" % label)
        if t == "counter":
            if not name.endswith("_total"):
                err("counter name does not end in _total")
            if not v >= 0:
                err("negative counter")
        if t in ("counter", "gauge") and name != fam:
            err("sample name differs from its TYPE")
        if t == "histogram":
            rest = tuple(x for x in labels if x[0] != "le")
            if name == fam + "_bucket":
                le = dict(labels).get("le")
                if le is None:
                    err("bucket without le")
                    continue
                try:
                    hist.setdefault((fam, rest), []).append((parse_value(le), v, no))
                except ValueError:
                    err("bad le %r" % le)
            elif name == fam + "_count":
                counts[(fam, rest)] = (v, no)
            elif name != fam + "_sum":
                err("histogram sample that is not _bucket, _sum or _count")
            if name != fam + "_bucket" and "le" in dict(labels):
                err("le label outside _bucket")
    for (fam, rest), bs in hist.items():
        les = [b[0] for b in bs]
        if les != sorted(les):
            errs.append("line %d: %s%s: buckets not sorted by le" % (bs[0][2], fam, dict(rest)))
        for a, b in zip(bs, bs[1:]):
            if b[1] < a[1]:
                errs.append("line %d: %s%s: bucket le=%g is below the one before" % (b[2], fam, dict(rest), b[0]))
        if not bs or bs[-1][0] != math.inf:
            errs.append("%s%s: no le=\"+Inf\" bucket" % (fam, dict(rest)))
        elif (fam, rest) not in counts:
            errs.append("%s%s: no _count" % (fam, dict(rest)))
        elif counts[(fam, rest)][0] != bs[-1][1]:
            errs.append("line %d: %s%s: _count %g != +Inf bucket %g" % (counts[(fam, rest)][1], fam, dict(rest),
                                                                      counts[(fam, rest)][0], bs[-1][1]))
    for fam, t in types.items():
        if fam not in helps:
            errs.append("%s: TYPE without HELP" % fam)
    return errs, series


def lookup(series, spec):
    m = re.match("^(" + NAME + r")(\{.*\})?$", spec)
    if not m:
        return None
    labels = tuple((k, unescape(v)) for k, v in LABEL.findall(m.group(2) or ""))
    return series.get((m.group(1), labels))


def main(argv):
    args, gets, prefix, label = [], [], None, None
    it = iter(argv)
    for a in it:
        if a == "--get":
            gets.append(next(it))
        elif a == "--prefix":
            prefix = next(it)
        elif a == "--label":
            label = next(it)
        else:
            args.append(a)
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    text = sys.stdin.read() if args[0] == "-" else open(args[0]).read()
    errs, series = check(text, prefix, label)
    for e in errs:
        print("promcheck: " + e, file=sys.stderr)
    for g in gets:
        v = lookup(series, g)
        if v is None:
            print("missing")
        elif math.isinf(v) or math.isnan(v) or v != int(v):
            print(repr(v))
        else:
            print("%d" % v)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
