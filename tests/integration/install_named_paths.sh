# install_named_paths.sh -- every path the README and the manual pages name is there: a source-tree path
# (or a bare source file name) in the tree; a package path (/usr/share/doc/conncap/..., /usr/bin/conncap)
# in what `make install PREFIX=/usr` puts, which the Debian package ships (debian/rules installs with
# it; the files dh_compress would gzip are taken as renamed); and, since the README and the manual pages
# are installed, every examples/ and doc/ file they name is installed beside them. Every CONNCAP_*
# variable the README names is in a manual page.
. "$(dirname "$0")/../lib/harness.sh"
if [ -n "${SAN:-}" ]; then echo "skipped under SAN=$SAN: the install set is checked on the plain build"; exit 77; fi
multi=x86_64-linux-gnu
cp -a "$BUILD" "$T/build"
make --no-print-directory -C "$ROOT" BUILD="$T/build" install PREFIX=/usr LIBDIR=/usr/lib/$multi DESTDIR="$T/root" \
    >"$T/install.out" 2>&1 || h_fail "make install: exit $?: $(tail -5 "$T/install.out")"
python3 - "$ROOT" "$T/root" "$multi" <<'PY' || h_fail "named paths (see above)"
import glob, os, re, subprocess, sys
root, inst, multi = sys.argv[1:4]
DOCDIR = "/usr/share/doc/conncap"
bad = []

# -- the package: what make install put, as dh_compress leaves it (debian/rules' -X exclusions;
# "Exclude files that contain item anywhere in their filename"), plus what dh adds itself
rules = open(os.path.join(root, "debian/rules")).read()
excl = re.findall(r"-X(\S+)", " ".join(l for l in rules.splitlines() if "dh_compress" in l))
pkg = set()
for d, _, fs in os.walk(inst):
    for f in fs:
        p = os.path.join(d, f)[len(inst):]
        rel = p.lstrip("/")
        if (rel.startswith("usr/share/doc/") and os.path.getsize(os.path.join(inst, rel)) > 4096
                and not any(x in rel for x in excl) and not rel.endswith("/copyright")):
            p += ".gz"   # dh_compress would gzip it: its name in the package is not the one named
        pkg.add(p)
pkg.add(DOCDIR + "/copyright")   # dh_installdocs adds debian/copyright
pkg_dirs = {os.path.dirname(p) for p in pkg}
while True:
    more = {os.path.dirname(p) for p in pkg_dirs} - pkg_dirs
    if not more:
        break
    pkg_dirs |= more

tree = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True).stdout.split()
if not tree:   # not a git checkout: the files as they are
    tree = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
            if not os.path.relpath(d, root).startswith(("build", ".git"))]
tree_set = set(tree)
tree_dirs = {os.path.dirname(p) for p in tree}
for p in list(tree_dirs):
    while p:
        p = os.path.dirname(p); tree_dirs.add(p)
basenames = {os.path.basename(p) for p in tree}
TOP = ("core", "runtime", "shim", "cli", "lua", "conf", "tests", "examples", "doc", "completions", "debian",
       "bench", "mk")
MADE = ("bench/node_modules",)   # made by a make target (make bench's npm install), not kept in the tree

def in_tree(p):
    p = p.rstrip("/")
    if any(c in p for c in "*?["):
        return any(glob.fnmatch.fnmatch(t, p) for t in tree)
    return p in tree_set or p in tree_dirs

def shipped(rel):
    """A tree path under examples/ or doc/ as the package has it."""
    rel = rel.rstrip("/")
    if re.fullmatch(r"doc/[^/]+\.[15]", rel):
        return True                                   # a manual page: installed as such
    p = DOCDIR + "/" + rel
    if any(c in rel for c in "*?["):
        return any(glob.fnmatch.fnmatch(x, p) for x in pkg)
    return p in pkg or p in pkg_dirs

PATH = re.compile(r"(?<![\w.$\-{}<>:/@])(/?[A-Za-z0-9_.*+-]+(?:/[A-Za-z0-9_.*+-]+)+/?)")
SRC = re.compile(r"(?<![\w./-])([A-Za-z0-9_-]+\.(?:c|h|lua|py|sh))(?![\w/-])")

def check(name, text, shipped_doc):
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".,;:)")
        if p.startswith("/"):
            if p.startswith((DOCDIR + "/", "/usr/share/man/", "/usr/bin/conncap")):
                if p.rstrip("/") not in pkg and p.rstrip("/") not in pkg_dirs:
                    bad.append("%s names %s, which the package does not have" % (name, p))
            continue
        if p.split("/")[0] not in TOP or p.rstrip("/").startswith(MADE):
            continue
        if not in_tree(p):
            bad.append("%s names %s, which is not in the tree" % (name, p))
        elif shipped_doc and p.split("/")[0] in ("examples", "doc") and not shipped(p):
            bad.append("%s (installed) names %s, which make install does not put in %s" % (name, p, DOCDIR))
    for m in SRC.finditer(text):
        if m.group(1) not in basenames:
            bad.append("%s names %s, which no file of the tree is" % (name, m.group(1)))

readme = open(os.path.join(root, "README.md")).read()
readme = re.sub(r"https?://\S+", " ", readme)
check("README.md", readme, True)
def unroff(t):
    t = re.sub(r"^\.\\\".*$", "", t, flags=re.M)          # comments
    t = re.sub(r"\\f[BIRP]", "", t).replace("\\-", "-").replace("\\(em", " ")
    t = re.sub(r"^\.(?:B|I|BR|IR|RB|RI|IB|BI)\s+", "", t, flags=re.M)
    return re.sub(r'"', " ", t)
for m in ("doc/conncap.1", "doc/conncap.conf.5"):
    check(m, unroff(open(os.path.join(root, m)).read()), True)

# -- every CONNCAP_* variable of the README is in a manual page
man = "".join(unroff(open(os.path.join(root, m)).read()) for m in ("doc/conncap.1", "doc/conncap.conf.5"))
examples_only = {"CONNCAP_REDIS_PASSWORD"}   # a name password_env may give, as the README's examples do
for v in sorted(set(re.findall(r"\bCONNCAP_[A-Z_]*[A-Z]\b", readme)) - examples_only):
    if v not in man:
        bad.append("README names %s, which no manual page documents" % v)
for b in bad:
    print("FAIL:", b)
print("%d files in the package, %d in the tree" % (len(pkg), len(tree)))
sys.exit(1 if bad else 0)
PY
echo ok
