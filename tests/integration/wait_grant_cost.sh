# wait_grant_cost.sh -- connect loops on a full semaphore: a waiter granted by a release connects without another acquire (MONITOR).
# release.lua admits the head waiter in the same script and pushes it a 'g'
# token: a waited connect then costs Redis the refused acquire that queued
# it, one BLPOP and its release -- no second acquire. Old protocol: every
# wait ends with an acquire of its own (about 2 acquires per connect here).
. "$(dirname "$0")/../lib/harness.sh"
h_connloop_monitored 12 6
# acquires the clients sent that ran (a script call whose second key is
# :limit, followed by the script's own calls), grants a release made (its
# LPUSH of a 'g' token)
read -r acq grants < <(python3 - "$T/monitor" <<'EOF'
import re, sys
acq = grants = 0
pending = False
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r'^\S+ \[\d+ ([^\]]+)\] (.*)$', line)
    if not m:
        continue
    args = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
    if m.group(1) == "lua":
        if pending:
            acq, pending = acq + 1, False
        if args[:1] == ["LPUSH"] and ":wake:" in args[1] and args[2:3] == ["g"]:
            grants += 1
        continue
    pending = args[:1] in (["FCALL"], ["EVALSHA"]) and len(args) > 4 and args[4].endswith(":limit")
print(acq, grants)
EOF
)
waits=$(h_rcli hget 'conncap:{api}:stats' denied)
acquired=$(h_rcli hget 'conncap:{api}:stats' acquired)
h_note "72 connects: $acq acquires run, ${waits:-0} refused, $grants granted by a release; stats acquired ${acquired:-0}"
[ "${waits:-0}" -ge 20 ] || h_fail "too few waits to judge: ${waits:-0}"
[ "${acquired:-0}" -eq 72 ] || h_fail "stats: acquired ${acquired:-0}, want 72 (each grant counted once)"
[ "$grants" -ge $((waits * 8 / 10)) ] || h_fail "only $grants of ${waits} waits were granted by a release"
# each connect: one acquire (granted at once, or refused and queued); a few
# re-check on their own (a lease end, a refresh)
awk -v a="$acq" 'BEGIN {exit !(a <= 1.2 * 72)}' || h_fail "$acq acquires for 72 connects (want <= 1.2 per connect)"
wc=$(h_rcli hget 'conncap:{api}:stats' wait_count)
[ "${wc:-0}" -ge "$grants" ] || h_fail "wait histogram: wait_count ${wc:-0} < $grants waited grants"
[ "$(h_rcli exists 'conncap:{api}:grant' 'conncap:{api}:queue')" -eq 0 ] || h_fail "grant entries or tickets left"
echo ok
