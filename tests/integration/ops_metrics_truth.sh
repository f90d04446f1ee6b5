# ops_metrics_truth.sh -- the metrics and the alert say what is true through an outage and after set-limit:
# the README's textfile-collector command never leaves conncap_redis_up 1 (or any last good value) in the
# file while Redis is down; a semaphore that set-limit leaves full reads conncap_full_seconds from its
# fill (or from the set-limit), and `status --full-alert` fires, without waiting for a connect to try.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 600000
h_conf "$T/c.conf" api 3 30000 100 "127.0.0.1:$SRV_PORT"
prom() { # FILE SERIES...: checks FILE, prints each SERIES's value
    local f=$1 a=() x; shift
    for x in "$@"; do a+=(--get "$x"); done
    python3 "$ROOT/tests/lib/promcheck.py" "$f" --prefix conncap_ --label semaphore "${a[@]}"
}

# -- the node_exporter textfile collector, run as the README says
mkdir -p "$T/nx"
cmd=$(awk '/node_exporter textfile collector/ { f = 1 } f && /^```sh$/ { g = 1; next } g && /^```$/ { exit } g' "$ROOT/README.md")
[ -n "$cmd" ] || h_fail "README: no command for the node_exporter textfile collector"
h_note "README's command: $cmd"
textfile() { # runs the README's command with this test's paths
    local c=${cmd//\/var\/lib\/node_exporter/$T\/nx}
    c=${c//conncap metrics/\"\$CLI\" metrics -c \"\$T\/c.conf\"}
    eval "$c"
}
textfile >"$T/tf.out" 2>"$T/tf.err" || h_fail "textfile, Redis up: exit $?: $(cat "$T/tf.err")"
[ "$(prom "$T/nx/conncap.prom" conncap_redis_up 'conncap_limit{semaphore="api"}')" = "$(printf '1\n3')" ] ||
    h_fail "textfile, Redis up: $(cat "$T/nx/conncap.prom")"
h_redis_down
textfile >"$T/tf.out" 2>"$T/tf.err" && h_fail "textfile, Redis down: exit 0"
[ "$(prom "$T/nx/conncap.prom" conncap_redis_up 'conncap_holders{semaphore="api"}')" = "$(printf '0\nmissing')" ] ||
    h_fail "textfile while Redis is down still says: $(grep -v '^#' "$T/nx/conncap.prom" | head -5)"
printf 'semaphores = ( { name = "api"; limit = -1; } );\n' > "$T/bad.conf"
"$CLI" metrics -c "$T/bad.conf" --textfile "$T/nx/bad.prom" 2>/dev/null && h_fail "textfile with a bad configuration: exit 0"
[ "$(prom "$T/nx/bad.prom" conncap_redis_up)" = 0 ] || h_fail "textfile with a bad configuration: $(cat "$T/nx/bad.prom")"
h_redis_spawn_again
textfile >/dev/null 2>&1 || h_fail "textfile, Redis back: exit $?"
[ "$(prom "$T/nx/conncap.prom" conncap_redis_up)" = 1 ] || h_fail "textfile, Redis back: $(cat "$T/nx/conncap.prom")"
left=$(ls "$T/nx" | grep -v '\.prom$')
[ -z "$left" ] || h_fail "textfile left files behind: $left"
"$CLI" metrics -c "$T/c.conf" --textfile "$T/no-such-dir/x.prom" 2>"$T/err" && h_fail "textfile into a missing directory: exit 0"
grep -q 'cannot create' "$T/err" || h_fail "textfile into a missing directory says: $(cat "$T/err")"
h_note "textfile: redis_up 1, 0 while Redis is down (and with a bad configuration), 1 again"

# -- set-limit: a semaphore left full reads as full at once
full_s() { "$CLI" metrics -c "$T/c.conf" | prom - 'conncap_full_seconds{semaphore="api"}'; }
ge() { python3 -c "import sys; sys.exit(not float(sys.argv[1]) >= float(sys.argv[2]))" "$1" "$2"; }
holds=()
for i in 1 2; do
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 < <(sleep 600) >/dev/null 2>&1 &
    _pids+=("$!"); holds+=("$!")
    WAIT_S=10 h_wait_for h_holders_is api "$i" || h_fail "holder $i got no permit"
done
! ge "$(full_s)" 0.001 || h_fail "2 of 3 held, yet conncap_full_seconds $(full_s)"
# lowered to the holders: full from the set-limit, and nobody connects
"$CLI" set-limit -c "$T/c.conf" api 2 >/dev/null || h_fail "set-limit 2"
sleep 1.3
s=$(full_s)
ge "$s" 1.2 && ! ge "$s" 5 || h_fail "set-limit 2 with 2 holders, 1.3 s later: conncap_full_seconds $s"
out=$("$CLI" status -c "$T/c.conf" --full-alert 1 api); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q 'ALERT: no permit free for' || h_fail "status --full-alert 1 after set-limit: exit $rc: $out"
[ "$(h_rcli hget 'conncap:{api}:stats' denied)" = "" ] || h_fail "a connect was refused: the test meant none to try"
# lowered further: the fill under 2 still holds under 1, so the count goes on from it
"$CLI" set-limit -c "$T/c.conf" api 1 >/dev/null || h_fail "set-limit 1"
s=$(full_s)
ge "$s" 1.2 || h_fail "set-limit 1 after 2: conncap_full_seconds $s restarted from the set-limit"
# raised above the holders: a permit is free
"$CLI" set-limit -c "$T/c.conf" api 3 >/dev/null || h_fail "set-limit 3"
! ge "$(full_s)" 0.001 || h_fail "set-limit 3 with 2 holders: conncap_full_seconds $(full_s)"
"$CLI" status -c "$T/c.conf" --full-alert 1 api >/dev/null || h_fail "status alerts with a permit free"
[ -z "$(h_rcli hget 'conncap:{api}:stats' full_since)" ] || h_fail "set-limit 3 left full_since"
# --default (3) and then down to the holders with the file's limit: the same
"$CLI" set-limit -c "$T/c.conf" api --default >/dev/null || h_fail "set-limit --default"
h_conf "$T/c.conf" api 2 30000 100 "127.0.0.1:$SRV_PORT"
"$CLI" set-limit -c "$T/c.conf" api --default >/dev/null || h_fail "set-limit --default (file limit 2)"
sleep 1.1
s=$(full_s)
ge "$s" 1.0 || h_fail "set-limit --default to the file's 2 with 2 holders: conncap_full_seconds $s"
h_note "set-limit: full_seconds $s without a connect; alert at once"
for p in "${holds[@]}"; do kill "$p"; done
echo ok
