# examples_parse.sh -- the deployment examples parse (compose and Kubernetes YAML, systemd units with
# systemd-analyze verify, the Dockerfile's instructions), their conncap configurations pass
# `conncap check --offline`, and they and the README name the same paths, variables and entrypoint.
# (No Docker engine or cluster is needed: nothing is built or started.)
. "$(dirname "$0")/../lib/harness.sh"
EX="$ROOT/examples"
PY=/usr/bin/python3   # Debian's python3, which has python3-yaml
"$PY" -c 'import yaml' 2>/dev/null || h_fail "python3-yaml is missing (Debian package python3-yaml)"

# -- Dockerfile: every instruction known, a build stage on debian:bookworm, the
# runtime image copies the install, the entrypoint is conncap run
"$PY" - "$EX/docker/Dockerfile" > "$T/docker.env" <<'PY' || h_fail "Dockerfile: $(cat "$T/docker.env")"
import json, re, shlex, sys
known = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
         "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
lines, cur = [], ""
for raw in open(sys.argv[1]):
    s = raw.rstrip("\n")
    if not cur and (not s.strip() or s.lstrip().startswith("#")):
        continue
    if s.endswith("\\"):
        cur += s[:-1] + " "
        continue
    lines.append(cur + s); cur = ""
assert not cur, "a continuation line ends the file"
ins = [(l.split(None, 1)[0].upper(), l.split(None, 1)[1].strip()) for l in lines]
for k, _ in ins:
    assert k in known, "unknown instruction " + k
froms = [a for k, a in ins if k == "FROM"]
assert re.fullmatch(r"debian:bookworm AS build", froms[0]), froms
assert len(froms) == 2 and froms[1].startswith("debian:bookworm"), froms
run = " ".join(a for k, a in ins if k == "RUN")
assert re.search(r"make install PREFIX=/usr\b.*DESTDIR=/out", run), "no make install into /out"
assert any(k == "COPY" and a.startswith("--from=build /out/ /") for k, a in ins), "runtime does not copy the install"
ep = [json.loads(a) for k, a in ins if k == "ENTRYPOINT"]
assert ep == [["/usr/bin/conncap", "run", "--"]], ep
env = dict(a.split("=", 1) for k, a in ins if k == "ENV")
print("ENTRYPOINT=" + shlex.quote(json.dumps(ep[0])))
print("CONNCAP_CONFIG=" + shlex.quote(env["CONNCAP_CONFIG"]))
PY
. "$T/docker.env"

# -- compose: Redis, the legacy program built from the Dockerfile, configured by
# the environment; the mounted file is where CONNCAP_CONFIG says and is valid
"$PY" - "$EX/docker/compose.yaml" "$EX/docker" "$CONNCAP_CONFIG" > "$T/compose.env" <<'PY' || h_fail "compose.yaml: $(cat "$T/compose.env")"
import os, re, shlex, sys, yaml
d = yaml.safe_load(open(sys.argv[1])); here = sys.argv[2]
sv = d["services"]
assert {"redis", "legacy"} <= set(sv), sv.keys()
assert sv["redis"]["image"].startswith("redis:"), sv["redis"]
lg = sv["legacy"]
df = os.path.normpath(os.path.join(here, lg["build"]["context"], lg["build"]["dockerfile"]))
assert df == os.path.join(here, "Dockerfile"), df
env = lg["environment"]
assert env["CONNCAP_CONFIG"] == sys.argv[3], env            # as the image sets it
mounts = [v.split(":") for v in lg["volumes"]]
src = [m[0] for m in mounts if m[1] == env["CONNCAP_CONFIG"]]
assert src and os.path.isfile(os.path.join(here, src[0])), mounts
conf = open(os.path.join(here, src[0])).read()
pw_env = re.search(r'password_env\s*=\s*"([^"]+)"', conf).group(1)
assert pw_env in env, (pw_env, env)
rc = sv["redis"]["command"]
assert rc[rc.index("--requirepass") + 1] == env[pw_env], "redis and the client disagree on the password"
assert "curl" in " ".join(lg["command"]) and "upstream" in sv, lg["command"]
print("CONF=" + shlex.quote(os.path.join(here, src[0])))
print("PW_ENV=" + shlex.quote(pw_env))
print("PW=" + shlex.quote(env[pw_env]))
print("ENV_NAMES=" + shlex.quote(" ".join(sorted(env))))
PY
. "$T/compose.env"
env "$PW_ENV=$PW" "$CLI" check --offline -c "$CONF" >/dev/null 2>"$T/err" || h_fail "compose's conncap.conf: $(cat "$T/err")"
# as an image build or CI runs it: without the secret, which is not checked (and said so)
env -u "$PW_ENV" "$CLI" check --offline -c "$CONF" >"$T/out" 2>"$T/err" ||
    h_fail "check --offline of compose's conncap.conf without $PW_ENV: exit $?: $(cat "$T/err")"
grep -q "note: .*redis.password_env: environment variable $PW_ENV is not set: the password is not checked" "$T/err" &&
    grep -q 'password not checked' "$T/out" || h_fail "check --offline without the secret says: $(cat "$T/out" "$T/err")"
env -u "$PW_ENV" "$CLI" check -c "$CONF" >/dev/null 2>"$T/err" && h_fail "check (online) without $PW_ENV passed"
grep -q "environment variable $PW_ENV is not set\$" "$T/err" || h_fail "check (online) without the secret: $(cat "$T/err")"
grep -q 'CONNCAP_REDIS_URL' "$EX/docker/compose.yaml" || h_fail "compose.yaml does not say where CONNCAP_REDIS_URL goes"

# -- Kubernetes: ConfigMap with the file, Secret with the password (password_file),
# the container wrapped by conncap run; the ConfigMap's file is valid
"$PY" - "$EX/kubernetes/conncap.yaml" "$T" > "$T/k8s.env" <<'PY' || h_fail "conncap.yaml: $(cat "$T/k8s.env")"
import re, shlex, sys, yaml
docs = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x]
by = {}
for x in docs:
    assert x.get("apiVersion") and x.get("kind") and x["metadata"]["name"], x
    by.setdefault(x["kind"], {})[x["metadata"]["name"]] = x
cm = by["ConfigMap"]["conncap-config"]; sec = by["Secret"]["conncap-redis"]
dep = by["Deployment"]["legacy-client"]["spec"]["template"]["spec"]
conf = cm["data"]["conncap.conf"]
c = dep["containers"][0]
vols = {v["name"]: v for v in dep["volumes"]}
mnt = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
cfg_path = mnt["conncap-config"] + "/conncap.conf"
assert vols["conncap-config"]["configMap"]["name"] == "conncap-config"
assert c["command"] == ["/usr/bin/conncap", "run", "-c", cfg_path, "--"], c["command"]
assert {"name": "CONNCAP_CONFIG", "value": cfg_path} in c["env"], c["env"]
pf = re.search(r'password_file\s*=\s*"([^"]+)"', conf).group(1)
assert vols["conncap-redis"]["secret"]["secretName"] == "conncap-redis"
assert pf == mnt["conncap-redis"] + "/password" and "password" in sec["stringData"], (pf, mnt)
init = dep["initContainers"][0]
assert init["command"][:3] == ["/usr/bin/conncap", "check", "--offline"], init
open(sys.argv[2] + "/k8s.secret", "w").write(sec["stringData"]["password"] + "\n")
open(sys.argv[2] + "/k8s.conf", "w").write(conf.replace(pf, sys.argv[2] + "/k8s.secret"))
print("K8S_CONFIG=" + shlex.quote(cfg_path))
print("K8S_PWFILE=" + shlex.quote(pf))
PY
. "$T/k8s.env"
"$CLI" check --offline -c "$T/k8s.conf" >/dev/null 2>"$T/err" || h_fail "the ConfigMap's conncap.conf: $(cat "$T/err")"
# the init container's check, where the Secret is not mounted (a CI run of the manifest's file)
rm "$T/k8s.secret"
"$CLI" check --offline -c "$T/k8s.conf" >/dev/null 2>"$T/err" || h_fail "the ConfigMap's conncap.conf without its secret: $(cat "$T/err")"
grep -q 'redis.password_file: cannot read .*k8s.secret (No such file or directory): the password is not checked' "$T/err" ||
    h_fail "check --offline without the password file says: $(cat "$T/err")"

# -- systemd: the unit and the drop-in verify (conncap's path pointed at this build)
mkdir -p "$T/sd/nginx.service.d"
sed "s|/usr/bin/conncap|$CLI|g" "$EX/systemd/legacy-client.service" > "$T/sd/legacy-client.service"
printf '[Unit]\nDescription=stand-in for nginx\n[Service]\nExecStart=/bin/true\n' > "$T/sd/nginx.service"
sed "s|/usr/bin/conncap|$CLI|g" "$EX/systemd/nginx.service.d/conncap.conf" > "$T/sd/nginx.service.d/conncap.conf"
if command -v systemd-analyze >/dev/null; then
    for u in legacy-client.service nginx.service; do
        (cd "$T/sd" && systemd-analyze verify --man=no "./$u") >"$T/sd.out" 2>&1 && [ ! -s "$T/sd.out" ] ||
            h_fail "systemd-analyze verify $u: $(cat "$T/sd.out")"
    done
else   # no systemd here: sections and Key=Value lines only
    for f in "$T/sd/legacy-client.service" "$T/sd/nginx.service.d/conncap.conf"; do
        bad=$(grep -Ev '^(#.*|\[(Unit|Service|Install)\]|[A-Za-z]+=.*|)$' "$f")
        [ -z "$bad" ] || h_fail "$f: not a unit file line: $bad"
    done
fi
grep -q '^Environment=LD_PRELOAD=.*/conncap/libconncap.so$' "$EX/systemd/nginx.service.d/conncap.conf" ||
    h_fail "the drop-in does not preload the shim from its private directory"

# -- the README's quick start: right after make demo / make test, before the reference; its
# configuration is valid and its commands are conncap's
"$PY" - "$ROOT/README.md" "$T/quick.conf" "$T/quick.cmds" <<'PY' || h_fail "README quick start: see above"
import re, sys
text = open(sys.argv[1]).read()
heads = [m.group(1) for m in re.finditer(r"^## (.+)$", text, re.M)]
assert heads[:2] == ["Quick start", "Rolling it out"], heads[:3]
top = text.index("```sh\nmake demo")
assert top < text.index("## Quick start"), "make demo / make test are not above the quick start"
qs = text[text.index("## Quick start"):text.index("## Rolling it out")]
assert len(qs.splitlines()) <= 40, "the quick start is %d lines, more than a screen" % len(qs.splitlines())
block = re.search(r"```sh\n(.*?)```", qs, re.S).group(1)
conf = re.search(r"<<'EOF'\n(.*?)^EOF$", block, re.S | re.M).group(1)
open(sys.argv[2], "w").write(conf)
cmds = [l.split("#")[0].split() for l in block.splitlines() if l.startswith("conncap ")]
assert [c[1] for c in cmds][:1] == ["check"] and {"run", "status"} <= {c[1] for c in cmds}, cmds
open(sys.argv[3], "w").write("\n".join(c[1] for c in cmds) + "\n")
PY
"$CLI" check --offline -c "$T/quick.conf" >/dev/null 2>"$T/err" || h_fail "the quick start's configuration: $(cat "$T/err")"
while read -r c; do
    "$CLI" "$c" --help >/dev/null 2>&1 || h_fail "the quick start runs conncap $c, which is no command"
done < "$T/quick.cmds"

# -- the README names what the examples use
for s in "$ENTRYPOINT" "CONNCAP_CONFIG=$CONNCAP_CONFIG" "$K8S_CONFIG" "$K8S_PWFILE" examples/docker/Dockerfile \
         examples/docker/compose.yaml examples/kubernetes/conncap.yaml examples/systemd/legacy-client.service \
         examples/systemd/nginx.service.d/conncap.conf CONNCAP_REDIS_URL; do
    grep -qF -- "$s" "$ROOT/README.md" || h_fail "README does not name $s"
done
for v in $ENV_NAMES; do grep -qF -- "$v" "$ROOT/README.md" || h_fail "README does not name $v"; done
echo ok
