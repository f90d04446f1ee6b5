# shortlived.sh -- a process that connects once and closes before its first renewal starts no thread and
# sends Redis 2 commands (acquire, release); one that holds a permit for 3 leases is renewed throughout.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 600000
lease=3000          # first renewal due after 1 s
h_conf "$T/c.conf" s 10 $lease 2000 "127.0.0.1:$SRV_PORT"
export CONNCAP_CONFIG="$T/c.conf"
"$CLI" setup -c "$T/c.conf" >/dev/null || h_fail "conncap setup failed"
run() { LD_PRELOAD="$LIB" "$PROGS/taskhold" 127.0.0.1 "$SRV_PORT" "$@"; }
tasks() { awk '/^tasks/ {print $2}' "$1"; }

# What clients sent while CMD ran (commands run inside scripts show as "[N lua]").
sent() {
    redis-cli -s "$REDIS_SOCK" monitor >"$T/mon" 2>&1 &
    local mon=$!
    h_wait_for grep -q OK "$T/mon" || h_fail "MONITOR did not start"
    "$@" >"$T/out" 2>"$T/out.err" || h_fail "$*: $(cat "$T/out.err")"
    sleep 0.3
    kill $mon; wait $mon 2>/dev/null
    grep '^[0-9]' "$T/mon" | grep -v ' lua\] ' | awk '{print toupper($4)}' | tr -d '"' >"$T/cmds"
}

# 1. connect, close at once: no thread, 2 commands (FCALL acquire, FCALL release)
sent run 0 0
[ "$(tasks "$T/out")" -eq 1 ] || h_fail "a permit held < 1/3 lease started a thread: $(tasks "$T/out") tasks"
[ "$(tr '\n' ' ' <"$T/cmds")" = "FCALL FCALL " ] || h_fail "want FCALL FCALL, sent: $(tr '\n' ' ' <"$T/cmds")"
h_note "connect+close: 1 task, commands: $(tr '\n' ' ' <"$T/cmds")"
# the same checked independently of /proc: no clone at all
if command -v strace >/dev/null; then
    LD_PRELOAD="$LIB" strace -f -e trace=clone,clone3 -o "$T/st" "$PROGS/taskhold" 127.0.0.1 "$SRV_PORT" 0 0 >/dev/null
    ! grep -q 'clone' "$T/st" || h_fail "strace saw a thread start: $(grep clone "$T/st")"
fi

# 2. without the function library: the FCALL probe, then one command per
#    script (EVALSHA or, not known loaded, EVAL with the source), never
#    SCRIPT LOAD; the first process after SCRIPT FLUSH also gets one NOSCRIPT
h_rcli function flush >/dev/null
h_rcli script flush >/dev/null
for want in "FCALL EVALSHA EVAL EVAL " "FCALL EVALSHA EVAL "; do
    sent run 0 0
    [ "$(tr '\n' ' ' <"$T/cmds")" = "$want" ] || h_fail "without the library want $want, sent: $(tr '\n' ' ' <"$T/cmds")"
    h_note "without the library, sent: $want"
done
"$CLI" setup -c "$T/c.conf" >/dev/null || h_fail "conncap setup failed"

# 3. a permit held for 3 leases stays in Redis throughout (renewed): by a
#    program that keeps making interposed calls (close of other descriptors),
#    by a silent one (no interposed call) in a process older than the first
#    renewal, and by a silent young one with CONNCAP_HEARTBEAT=eager
held_throughout() { # NAME ENV... -- TASKHOLD ARGS...
    local name=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    env "${envs[@]}" LD_PRELOAD="$LIB" "$PROGS/taskhold" 127.0.0.1 "$SRV_PORT" "$@" >"$T/long.out" 2>"$T/long.err" &
    local pid=$! seen=0 end
    _pids+=("$pid")
    WAIT_S=10 h_wait_for grep -q connected "$T/long.out" || h_fail "$name: the holder did not connect"
    end=$(( $(date +%s%N) / 1000000 + 3 * lease - 200 ))
    while [ $(( $(date +%s%N) / 1000000 )) -lt $end ]; do
        [ "$(h_holders s)" -eq 1 ] || h_fail "$name: the holder vanished from redis after $seen checks"
        seen=$((seen + 1)); sleep 0.1
    done
    wait $pid || h_fail "$name: the holder failed: $(cat "$T/long.err")"
    [ "$(tasks "$T/long.out")" -ge 2 ] || h_fail "$name: a permit held for 3 leases started no heartbeat"
    h_holders_is s 0 || WAIT_S=5 h_wait_for h_holders_is s 0 || h_fail "$name: the permit was not given back"
    h_note "$name: held $((3 * lease)) ms (lease $lease), present at each of $seen checks, $(tasks "$T/long.out") tasks"
}
held_throughout "working holder" -- $((3 * lease)) 100
held_throughout "silent holder, older process" -- $((3 * lease)) 0 $((lease / 2))
held_throughout "silent young holder, eager" CONNCAP_HEARTBEAT=eager -- $((3 * lease)) 0
echo ok
