# redis_hostile_drip.sh -- a Redis that drips its reply (1 byte every 150 ms, never ending) costs a connect command_timeout_ms, not forever; so for the conncap command and a metrics scrape.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/fakeredis.sh"
h_server_start 0
fr_start --mode drip --bytes 1 --ms 150
fr_conf "$T/c.conf" api 0 "127.0.0.1:$SRV_PORT"

# the shim: one connect, Redis dripping: refused (on_redis_down closed)
# within a few command_timeout_ms (200 ms)
fr_measure shim 20 env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/failclient" try 127.0.0.1 "$SRV_PORT" 1
h_note "shim: exit $M_RC after $M_MS ms (killed: $M_KILLED), peak $M_KB kB: $(cat "$T/shim.out")"
[ "$M_KILLED" = none ] || h_fail "the program hung on a dripping Redis (killed after $M_MS ms)"
[ "$M_RC" -eq 0 ] || h_fail "the program exited $M_RC"
read -r e ms < "$T/shim.out"
[ "$e" = ECONNREFUSED ] || h_fail "connect: $e, want ECONNREFUSED (on_redis_down closed)"
[ "${ms%.*}" -lt 1000 ] || h_fail "the connect took $ms ms against a 200 ms command timeout"
[ "$M_KB" -lt 65536 ] || h_fail "peak memory $M_KB kB"

# Sentinel and Cluster discovery: the same deadline for SENTINEL
# get-master-addr-by-name and CLUSTER SLOTS
for kind in sentinel cluster; do
    case $kind in
        sentinel) redis="sentinels = ( \"127.0.0.1:$FR_PORT\" ); master = \"m\";" ;;
        cluster) redis="cluster = ( \"127.0.0.1:$FR_PORT\" );" ;;
    esac
    FR_REDIS=$redis fr_conf "$T/$kind.conf" api 0 "127.0.0.1:$SRV_PORT"
    fr_measure $kind 20 env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/$kind.conf" "$PROGS/failclient" try 127.0.0.1 "$SRV_PORT" 1
    h_note "$kind: exit $M_RC after $M_MS ms (killed: $M_KILLED): $(cat "$T/$kind.out")"
    [ "$M_KILLED" = none ] || h_fail "$kind: the program hung on a dripping Redis (killed after $M_MS ms)"
    read -r e ms < "$T/$kind.out"
    [ "$e" = ECONNREFUSED ] || h_fail "$kind: connect: $e, want ECONNREFUSED"
    [ "${ms%.*}" -lt 1500 ] || h_fail "$kind: the connect took $ms ms against 200 ms timeouts"
done

# the conncap command: fails (exit 2) with a timeout, within a few timeouts
fr_measure cli 20 "$CLI" status -c "$T/c.conf"
h_note "conncap status: exit $M_RC after $M_MS ms: $(head -c 200 "$T/cli.err")"
[ "$M_KILLED" = none ] || h_fail "conncap status hung on a dripping Redis"
[ "$M_RC" -eq 2 ] || h_fail "conncap status exited $M_RC, want 2"
grep -q "timed out" "$T/cli.err" || h_fail "no timeout said: $(cat "$T/cli.err")"
[ "$M_MS" -lt 3000 ] || h_fail "conncap status took $M_MS ms"

# conncap metrics --listen: a scrape answers (conncap_redis_up 0), and again
port=$(h_free_port)
"$CLI" metrics -c "$T/c.conf" --listen "127.0.0.1:$port" 2>"$T/metrics.err" &
_pids+=("$!")
WAIT_S=10 h_wait_for grep -q serving "$T/metrics.err" || h_fail "metrics did not start: $(cat "$T/metrics.err")"
for i in 1 2; do
    fr_measure scrape$i 20 curl -s --max-time 15 "http://127.0.0.1:$port/metrics"
    h_note "scrape $i: curl exit $M_RC after $M_MS ms"
    [ "$M_RC" -eq 0 ] || h_fail "scrape $i: curl exit $M_RC after $M_MS ms (the server hung)"
    grep -q '^conncap_redis_up 0' "$T/scrape$i.out" || h_fail "scrape $i: $(cat "$T/scrape$i.out")"
    [ "$M_MS" -lt 5000 ] || h_fail "scrape $i took $M_MS ms"
done
echo ok
