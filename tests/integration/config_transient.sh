# config_transient.sh -- a configuration that cannot be loaded for a transient reason is loaded at a later connect, never given
# up for the process's life (issue 24). A real resource limit: RLIMIT_NOFILE reached, then freed.
# Limit 3, 3 processes x 3 threads, each connect held 300 ms by the counting server, on_redis_down = "closed".
#  1. the table is full at the first connect (one descriptor free: the connect's own socket): that connect
#     is refused (on_redis_down = "closed": the shim cannot reach Redis without a descriptor), the 9 made
#     after the fillers are closed are capped: the upstream sees 3 at most, and 3.
#  2. the table is full when the shim's constructor runs (filled by the program's .preinit_array, before
#     any library's constructor): the file cannot even be opened. A first connect (to an uncapped port)
#     still at the limit passes; after the fillers are closed the 9 are capped again; each process said
#     once that it could not load the file, and once that it loaded it later.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 20
FREE_PORT=$SRV_PORT

# phase NAME FILL-MODE [FIRST-PORT]: 3 processes at once; their outputs in $T/NAME.P.out, stderr .err
phase() {
    local name=$1 mode=$2 first=${3:-} p pids=()
    h_server_start 300
    ON_DOWN=closed h_conf "$T/c.conf" tr 3 30000 20000 "127.0.0.1:$SRV_PORT"
    for p in 1 2 3; do
        LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/privclient" --fill "$mode" ${first:+--first "$first"} \
            "$SRV_PORT" 3 >"$T/$name.$p.out" 2>"$T/$name.$p.err" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    h_note "$name: upstream max $(h_server_stat max), total $(h_server_stat total); first connects: $(cat "$T/$name".*.out | sed -n 's/^first //p' | sort | uniq -c | paste -sd, -); threads: $(cat "$T/$name".*.out | grep '^ok' | sort | uniq -c | paste -sd, -)"
    h_note "$name: the shim said: $(cat "$T/$name".*.err | sed 's/^conncap\[[0-9]*\]: //' | sort | uniq -c | head -n 5 | paste -sd'|' -)"
}

# both phases run, then every failure is reported
bad=()
no() { bad+=("$*"); }

phase connect connect
for p in 1 2 3; do
    grep -qx 'first ECONNREFUSED' "$T/connect.$p.out" ||
        no "connect: process $p: the connect made at RLIMIT_NOFILE was not refused (on_redis_down = closed): $(head -n 1 "$T/connect.$p.out")"
    grep -qx 'ok 3 fail 0' "$T/connect.$p.out" || no "connect: process $p: $(tail -n 1 "$T/connect.$p.out")"
done
max=$(h_server_stat max)
[ "$max" -le 3 ] || no "connect: cap exceeded after RLIMIT_NOFILE was freed: the upstream saw $max, limit 3"
[ "$max" -ge 3 ] || no "connect: the cap of 3 was never reached (max $max)"
[ "$(h_server_stat total)" -eq 9 ] || no "connect: the upstream saw $(h_server_stat total) connections, want 9 (the refused ones never reach it)"
WAIT_S=5 h_wait_for h_holders_is tr 0 || no "connect: holders left: $(h_rcli zrange 'conncap:{tr}:holders' 0 -1)"

phase load load "$FREE_PORT"
for p in 1 2 3; do
    grep -qx 'first ok' "$T/load.$p.out" || no "load: process $p: the uncapped first connect failed: $(head -n 1 "$T/load.$p.out")"
    grep -qx 'ok 3 fail 0' "$T/load.$p.out" || no "load: process $p: $(tail -n 1 "$T/load.$p.out")"
    n=$(grep -c 'Too many open files' "$T/load.$p.err")
    [ "$n" -eq 1 ] || no "load: process $p said $n times that it could not load the file, want once"
    grep -q 'loaded .* after' "$T/load.$p.err" || no "load: process $p did not say it loaded the file later"
done
max=$(h_server_stat max)
[ "$max" -le 3 ] || no "load: cap exceeded after the load failed with EMFILE: the upstream saw $max, limit 3"
[ "$max" -ge 3 ] || no "load: the cap of 3 was never reached (max $max)"
WAIT_S=5 h_wait_for h_holders_is tr 0 || no "load: holders left: $(h_rcli zrange 'conncap:{tr}:holders' 0 -1)"
[ ${#bad[@]} -eq 0 ] || h_fail "$(printf '%s\n' "${bad[@]}")"
echo ok
