# ops_monitoring_kit.sh -- examples/monitoring/: the Prometheus alert rules pass `promtool check rules` (Debian's
# prometheus package has promtool; without it they are parsed with python3-yaml) and fire when they should
# (`promtool test rules`), the Grafana dashboard is valid JSON whose every query is valid PromQL; both use
# only metrics `conncap metrics` exports, the dashboard shows every one, and the README names both files.
. "$(dirname "$0")/../lib/harness.sh"
MON="$ROOT/examples/monitoring"
RULES="$MON/conncap-alerts.yml"
DASH="$MON/conncap-dashboard.json"
PY=/usr/bin/python3   # Debian's python3, which has python3-yaml
"$PY" -c 'import yaml' 2>/dev/null || h_fail "python3-yaml is missing (Debian package python3-yaml)"
[ -f "$RULES" ] && [ -f "$DASH" ] || h_fail "examples/monitoring/ lacks conncap-alerts.yml or conncap-dashboard.json"

# -- what conncap metrics exports, from a real scrape
h_redis_start
h_conf "$T/c.conf" api 2 3000 100 "127.0.0.1:1"
"$CLI" metrics -c "$T/c.conf" > "$T/m.prom" || h_fail "conncap metrics: exit $?"
sed -n 's/^\([a-z_:]*\)[{ ].*/\1/p' "$T/m.prom" | sort -u > "$T/series"
sed -n 's/^# TYPE \([a-z_:]*\) .*/\1/p' "$T/m.prom" | sort -u > "$T/families"
[ "$(wc -l < "$T/families")" -ge 15 ] || h_fail "conncap metrics exports only: $(cat "$T/families")"

# -- promtool, if installed, else python3-yaml only
if command -v promtool >/dev/null; then
    promtool check rules "$RULES" > "$T/pc.out" 2>&1 || h_fail "promtool check rules: $(cat "$T/pc.out")"
    h_note "promtool check rules: $(grep -o 'SUCCESS.*' "$T/pc.out")"
else
    h_note "no promtool (Debian package prometheus): the rules are parsed with python3-yaml only"
fi

"$PY" - "$RULES" "$DASH" "$T/series" "$T/families" "$T/dash-rules.yml" <<'PY' || h_fail "the monitoring kit (see above)"
import json, re, sys, yaml
rules_f, dash_f, series_f, fam_f, out_f = sys.argv[1:6]
series = set(open(series_f).read().split())
families = set(open(fam_f).read().split())
others = {"node_textfile_mtime_seconds"}   # node_exporter's, for the textfile collector
bad = []
def metrics_of(expr):
    return set(re.findall(r"\b(conncap_[a-z_]+|node_[a-z_]+)\b", expr))

# the rules: the shape Prometheus loads, every alert named once, labelled and explained
doc = yaml.safe_load(open(rules_f))
names = []
for g in doc["groups"]:
    assert g["name"] and g["rules"], g
    for r in g["rules"]:
        for k in ("alert", "expr"):
            if not r.get(k):
                bad.append("a rule without %s: %r" % (k, r))
        names.append(r.get("alert"))
        if r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
            bad.append("%s: severity is not critical, warning or info" % r.get("alert"))
        if not r.get("annotations", {}).get("summary"):
            bad.append("%s: no summary" % r.get("alert"))
        for m in metrics_of(r.get("expr", "")):
            if m not in series and m not in others:
                bad.append("%s uses %s, which conncap metrics does not export" % (r.get("alert"), m))
if len(names) != len(set(names)):
    bad.append("alert names repeat: %r" % names)
for want in ("conncap_redis_up", "conncap_full_seconds", "conncap_holders", "conncap_timed_out_total",
             "node_textfile_mtime_seconds"):
    if not any(want in r["expr"] for g in doc["groups"] for r in g["rules"]):
        bad.append("no alert on %s" % want)

# the dashboard: Grafana's JSON model, every query on the datasource variable
d = json.load(open(dash_f))
for k in ("title", "uid", "panels", "templating", "schemaVersion"):
    if k not in d:
        bad.append("dashboard: no %s" % k)
ids, used, recs = set(), set(), []
tvars = {v["name"] for v in d["templating"]["list"]}
if not {"datasource", "semaphore"} <= tvars:
    bad.append("dashboard: variables %r, want datasource and semaphore" % tvars)
for p in d["panels"]:
    if p["id"] in ids:
        bad.append("dashboard: panel id %r twice" % p["id"])
    ids.add(p["id"])
    gp = p["gridPos"]
    if gp["x"] < 0 or gp["w"] <= 0 or gp["x"] + gp["w"] > 24 or gp["h"] <= 0:
        bad.append("dashboard: %s: gridPos %r" % (p["title"], gp))
    if p["datasource"].get("uid") != "${datasource}":
        bad.append("dashboard: %s does not use the datasource variable" % p["title"])
    if not p.get("targets"):
        bad.append("dashboard: %s has no query" % p["title"])
    for t in p.get("targets", []):
        e = t["expr"]
        for m in metrics_of(e):
            used.add(m)
            if m not in series:
                bad.append("dashboard: %s uses %s, which conncap metrics does not export" % (p["title"], m))
        recs.append(e.replace("$semaphore", ".*").replace("$__rate_interval", "5m"))
for f in families:
    if not any(u == f or u.startswith(f + "_") for u in used):
        bad.append("dashboard: no panel shows %s" % f)
# each query as a recording rule: promtool then checks it is PromQL
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [{"record": "conncap_dashboard:q%d" % i, "expr": e}
                                                            for i, e in enumerate(recs)]}]}, open(out_f, "w"))
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY

if command -v promtool >/dev/null; then
    promtool check rules "$T/dash-rules.yml" > "$T/pd.out" 2>&1 || h_fail "a dashboard query is not PromQL: $(cat "$T/pd.out")"
    # the alerts fire when they should, and not otherwise
    cat > "$T/alerts.test.yml" <<TEST
rule_files: ["$RULES"]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'conncap_redis_up{instance="h1"}'
        values: '1 1 0 0 0 0 0'
      - series: 'conncap_full_seconds{semaphore="api",instance="h1"}'
        values: '0 60 120 180 240 300 360 420'
      - series: 'conncap_full_seconds{semaphore="api",instance="h2"}'
        values: '0 60 120 180 240 300 360 420'
      - series: 'conncap_full_seconds{semaphore="db",instance="h1"}'
        values: '0 0 0 0 0 0 0 0'
      - series: 'conncap_holders{semaphore="api",instance="h1"}'
        values: '2 3 3 3 3 3 3 3'
      - series: 'conncap_limit{semaphore="api",instance="h1"}'
        values: '2 2 2 2 2 2 2 2'
      - series: 'conncap_timed_out_total{semaphore="api",instance="h1"}'
        values: '0 5 10 15 20 25 30 35 40 45 50 55 60'
      - series: 'node_textfile_mtime_seconds{file="/var/lib/node_exporter/conncap.prom",instance="h1"}'
        values: '0 0 0 0 0 0 0 0 0 0 0 0 0 0 0'
    alert_rule_test:
      - eval_time: 2m
        alertname: ConncapRedisUnreadable
        exp_alerts: []
      - eval_time: 4m
        alertname: ConncapRedisUnreadable
        exp_alerts:
          - exp_labels: { severity: critical, instance: h1 }
            exp_annotations:
              summary: "conncap cannot read its Redis (h1)"
              description: "conncap_redis_up has been 0 for a minute: the shim's processes follow on_redis_down (open: no fleet-wide cap; closed: capped connects fail; local: local_limit per process)."
      - eval_time: 5m
        alertname: ConncapNoPermitFree
        exp_alerts: []
      - eval_time: 6m
        alertname: ConncapNoPermitFree
        exp_alerts:
          - exp_labels: { severity: warning, semaphore: api }
            exp_annotations:
              summary: "api: no permit free for 6m 0s"
              description: "Every permit has been held for more than 5 minutes: new connects wait or fail. Idle keep-alive connections hold permits too (\`conncap holders api\` shows which programs hold them); raise the limit with \`conncap set-limit\` or shrink the pools."
      - eval_time: 4m
        alertname: ConncapOverLimit
        exp_alerts:
          - exp_labels: { severity: warning, semaphore: api }
            exp_annotations:
              summary: "api: more connections hold a permit than its limit"
              description: "After a limit lowered under live connections, or holders re-registered after Redis lost them (a restart or failover without the data). Nobody new gets in until the count is below the limit; see \`conncap status api\`."
      - eval_time: 12m
        alertname: ConncapConnectsTimingOut
        exp_alerts:
          - exp_labels: { severity: warning, semaphore: api }
            exp_annotations:
              summary: "api: connects fail for want of a permit"
              description: "0.0833 waits per second ended without a permit (the program's connect failed with on_timeout) over the last 5 minutes."
      - eval_time: 14m
        alertname: ConncapMetricsStale
        exp_alerts:
          - exp_labels: { severity: warning, instance: h1, file: /var/lib/node_exporter/conncap.prom }
            exp_annotations:
              summary: "the conncap textfile on h1 is not being rewritten"
              description: "/var/lib/node_exporter/conncap.prom is 14m 0s old: the cron job or timer that runs \`conncap metrics --textfile\` stopped, and its figures are stale."
TEST
    promtool test rules "$T/alerts.test.yml" > "$T/pt.out" 2>&1 || h_fail "promtool test rules: $(cat "$T/pt.out")"
    h_note "promtool test rules: the alerts fire as meant"
fi

# -- the README names both
for f in examples/monitoring/conncap-alerts.yml examples/monitoring/conncap-dashboard.json; do
    grep -qF "$f" "$ROOT/README.md" || h_fail "README does not name $f"
done
echo ok
