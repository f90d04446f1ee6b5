# ops_set_limit.sh -- `conncap set-limit` changes the cap of a program that keeps running: the servers see each new cap.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
h_redis_start
# one countserver per phase, all under one semaphore; the looping client
# re-reads which one to use, so each server's max is the cap of its phase
ports=(); stats=()
for i in 1 2 3 4; do h_server_start 300; ports+=("$SRV_PORT"); stats+=("$SRV_STATS"); done
h_conf "$T/c.conf" api 2 3000 20000 "127.0.0.1:${ports[0]}" "127.0.0.1:${ports[1]}" "127.0.0.1:${ports[2]}" "127.0.0.1:${ports[3]}"
stat() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
total_at_least() { [ "$(stat "$1" total)" -ge "$2" ]; }
cli() { "$CLI" "$1" -c "$T/c.conf" "${@:2}"; }

# bad input: exit 2, nothing written
for args in "api -1" "api x" "api 2147483648" "nosuch 3" "api" "api 3 --default" "api 3 4"; do
    # shellcheck disable=SC2086
    cli set-limit $args >/dev/null 2>"$T/err"; rc=$?
    [ $rc -eq 2 ] || h_fail "set-limit $args: exit $rc, want 2"
done
[ "$(h_rcli exists 'conncap:{api}:limit')" -eq 0 ] || h_fail "a refused set-limit wrote the limit key"

echo "${ports[0]}" > "$T/target"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" python3 "$ROOT/tests/lib/pyloop.py" 127.0.0.1 "$T/target" "$T/stop" \
    --threads 6 >"$T/loop.out" 2>"$T/loop.err" &
loop=$!

# phase PHASE LIMIT N: switch the running program to server PHASE, wait for N connections there
phase() {
    echo "${ports[$1]}" > "$T/target.tmp" && mv "$T/target.tmp" "$T/target"   # never half written
    WAIT_S=90 h_wait_for total_at_least "${stats[$1]}" "$3" || h_fail "phase $1: server $1 saw only $(stat "${stats[$1]}" total) connections"
    local max; max=$(stat "${stats[$1]}" max)
    h_note "phase $1: limit $2, server $1 saw $(stat "${stats[$1]}" total) connections, at most $max at once"
    [ "$max" -le "$2" ] || h_fail "phase $1: cap $2 exceeded: $max at once"
    [ "$max" -eq "$2" ] || h_fail "phase $1: at most $max at once, the cap $2 was never reached by 6 threads"
}
phase 0 2 12

out=$(cli set-limit api 4) || h_fail "set-limit api 4 failed"
echo "$out" | grep -q "limit 4 (runtime override; configured 2), was 2 (configured)" || h_fail "set-limit said: $out"
[ "$(h_rcli get 'conncap:{api}:limit')" = 4 ] || h_fail "limit key not 4"
[ "$(h_rcli pttl 'conncap:{api}:limit')" = -1 ] || h_fail "the limit key has a TTL"
cli status | grep -q "^api  *[0-9]/4 (runtime override)" || h_fail "status does not show the override: $(cli status)"
phase 1 4 24

cli set-limit api 1 >/dev/null || h_fail "set-limit api 1 failed"
phase 2 1 8

out=$(cli set-limit api --default) || h_fail "set-limit --default failed"
echo "$out" | grep -q "limit 2 (configured; override removed), was 1 (runtime override)" || h_fail "set-limit --default said: $out"
[ "$(h_rcli exists 'conncap:{api}:limit')" -eq 0 ] || h_fail "--default left the limit key"
phase 3 2 12

touch "$T/stop"
wait $loop || h_fail "the looping client failed"
h_note "looping client: $(cat "$T/loop.out")"
grep -q "failed 0$" "$T/loop.out" || h_fail "connects failed while waiting for a permit: $(cat "$T/loop.out"; tail -3 "$T/loop.err")"
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"
echo ok
