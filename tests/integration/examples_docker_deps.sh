# examples_docker_deps.sh -- examples/docker/Dockerfile can build and run what it builds, checked without a
# container engine: its build stage installs every package `mk/deps.sh --list build` names (libssl-dev:
# core/tls.c includes OpenSSL's headers), and its runtime stage every library the shim and the CLI may
# load -- their NEEDED entries and the sonames they dlopen (libssl.so.3, libcrypto.so.3 at the first TLS
# connect) -- mapped to this machine's Debian packages, unless the base image has them already.
. "$(dirname "$0")/../lib/harness.sh"
DF="$ROOT/examples/docker/Dockerfile"
command -v dpkg >/dev/null || { echo "skipped: no dpkg to map libraries to packages"; exit 77; }
want_codename=$(sed -n 's/^FROM debian:\([a-z]*\).* AS build$/\1/p' "$DF")
have_codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$want_codename" ] || h_fail "the Dockerfile's build stage is not FROM debian:CODENAME AS build"
if [ "$want_codename" != "$have_codename" ]; then
    echo "skipped: this machine is Debian '$have_codename', the Dockerfile's images '$want_codename' (package names differ)"
    exit 77
fi
sh "$ROOT/mk/deps.sh" --list build > "$T/build.pkgs" || h_fail "mk/deps.sh --list build: exit $?"
python3 - "$DF" "$T/build.pkgs" "$LIB" "$CLI" <<'PY' || h_fail "the Dockerfile's packages (see above)"
import os, re, subprocess, sys
df, build_list, shim, cli = sys.argv[1:5]
shim = shim.split(":")[-1]  # under SAN=asan LIB is "libasan.so:libconncap.so", the shim last

# -- the stages and the packages each one's RUN apt-get install lines name
lines, cur = [], ""
for raw in open(df):
    s = raw.rstrip("\n")
    if not cur and (not s.strip() or s.lstrip().startswith("#")):
        continue
    if s.endswith("\\"):
        cur += s[:-1] + " "
        continue
    lines.append(cur + s); cur = ""
stages = []
for l in lines:
    ins, _, arg = l.strip().partition(" ")
    if ins.upper() == "FROM":
        stages.append({"from": arg.strip(), "pkgs": set()})
    elif ins.upper() == "RUN" and stages:
        for cmd in re.split(r"&&|;|\|\|", arg):
            w = cmd.split()
            if len(w) >= 2 and w[0] in ("apt-get", "apt") and "install" in w:
                stages[-1]["pkgs"] |= {x for x in w[w.index("install") + 1:] if not x.startswith("-")}
assert len(stages) == 2, "want a build and a runtime stage: %r" % [s["from"] for s in stages]
build, runtime = stages
bad = []

need = [p.strip() for p in open(build_list) if p.strip()]
miss = [p for p in need if p not in build["pkgs"]]
if miss:
    bad.append("the build stage does not install %s (mk/deps.sh build needs them)" % " ".join(miss))

# -- every library the two binaries may load: NEEDED, and the sonames they dlopen
def sonames(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    names = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    data = open(path, "rb").read()
    names |= {m.decode() for m in re.findall(rb"(lib[A-Za-z0-9_+-]+\.so(?:\.[0-9]+)+)\x00", data)}
    # a sanitizer build (make test SAN=...) loads its runtime: the image's build makes none
    return {n for n in names if not re.match(r"lib(a|t|l|ub|hwa)san\.so", n)}

cache = {}
for l in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout.splitlines():
    m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", l)
    if m and ("x86-64" in m.group(2) or os.uname().machine != "x86_64"):
        cache.setdefault(m.group(1), m.group(3))

def package_of(path):
    cands = {path, os.path.realpath(path)}
    for p in list(cands):
        cands.add(p[4:] if p.startswith("/usr/") else "/usr" + p)
    for p in sorted(cands):
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0].split(",")[0].strip()
    return None

# -- what debian:*-slim has already: the required and essential packages, and what they depend on
q = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Priority}\t${Essential}\t${Pre-Depends}, ${Depends}\n"],
                   capture_output=True, text=True, check=True).stdout
deps, base = {}, set()
for l in q.splitlines():
    name, prio, ess, dep = (l.split("\t") + ["", "", ""])[:4]
    deps[name] = {re.split(r"[ :(]", d.strip())[0] for alt in dep.split(",") for d in alt.split("|")[:1] if d.strip()}
    if prio == "required" or ess == "yes":
        base.add(name)
todo = list(base)
while todo:
    for d in deps.get(todo.pop(), ()):
        if d in deps and d not in base:
            base.add(d); todo.append(d)

for binary in (shim, cli):
    for so in sorted(sonames(binary)):
        if so.startswith("ld-linux"):
            continue
        path = cache.get(so)
        if not path:
            bad.append("%s may load %s, which this machine does not have: cannot tell its package" % (binary, so))
            continue
        pkg = package_of(path)
        if not pkg:
            bad.append("%s: %s (%s) belongs to no package" % (binary, so, path))
        elif pkg not in runtime["pkgs"] and pkg not in base:
            bad.append("the runtime stage does not install %s, which has %s (%s loads it)"
                       % (pkg, so, os.path.basename(binary)))
        else:
            print("%s: %s from %s (%s)" % (os.path.basename(binary), so, pkg,
                                           "installed" if pkg in runtime["pkgs"] else "in the base image"))
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
echo ok
