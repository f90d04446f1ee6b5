# shortlived.sh -- a process that connects once and closes before its first renewal sends Redis 2 commands
# (acquire, release) and, with CONNCAP_HEARTBEAT=lazy, starts no thread; one that holds a permit for 3
# leases is renewed throughout.
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

# 1. connect, close at once: 2 commands (FCALL acquire, FCALL release), no
#    renewal; one thread (the heartbeat, its first beat not due yet), and
#    none with CONNCAP_HEARTBEAT=lazy
# (ThreadSanitizer's runtime starts a background thread of its own with a
# process's first thread: one more task under SAN=tsan)
most=2; [ "${SAN:-}" = tsan ] && most=3
sent run 0 0
[ "$(tasks "$T/out")" -le $most ] || h_fail "connect+close started more than the heartbeat: $(tasks "$T/out") tasks"
[ "$(tr '\n' ' ' <"$T/cmds")" = "FCALL FCALL " ] || h_fail "want FCALL FCALL, sent: $(tr '\n' ' ' <"$T/cmds")"
h_note "connect+close: $(tasks "$T/out") tasks, commands: $(tr '\n' ' ' <"$T/cmds")"
[ "$(h_rcli exists 'conncap:{s}:since')" = 0 ] || h_fail "a grant wrote an acquire time" # only renewals do
sent env CONNCAP_HEARTBEAT=lazy LD_PRELOAD="$LIB" "$PROGS/taskhold" 127.0.0.1 "$SRV_PORT" 0 0
[ "$(tasks "$T/out")" -eq 1 ] || h_fail "lazy: a permit held < 1/3 lease started a thread: $(tasks "$T/out") tasks"
[ "$(tr '\n' ' ' <"$T/cmds")" = "FCALL FCALL " ] || h_fail "lazy: want FCALL FCALL, sent: $(tr '\n' ' ' <"$T/cmds")"
h_note "connect+close, lazy: 1 task, commands: $(tr '\n' ' ' <"$T/cmds")"
# the same checked independently of /proc: no clone at all
# (under SAN=asan, LeakSanitizer's exit check clones a tracer of its own,
# and cannot run under ptrace anyway: it is off for this run)
if command -v strace >/dev/null; then
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        CONNCAP_HEARTBEAT=lazy LD_PRELOAD="$LIB" strace -f -e trace=clone,clone3 -o "$T/st" \
        "$PROGS/taskhold" 127.0.0.1 "$SRV_PORT" 0 0 >/dev/null
    ! grep -q 'clone' "$T/st" || h_fail "lazy: strace saw a thread start: $(grep clone "$T/st")"
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
#    silent program (no interposed call meanwhile), and with
#    CONNCAP_HEARTBEAT=lazy by one that keeps making interposed calls (close
#    of other descriptors) or by a silent one in a process older than the
#    first renewal
held_throughout() { # NAME ENV... -- TASKHOLD ARGS...
    local name=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    env "${envs[@]}" LD_PRELOAD="$LIB" "$PROGS/taskhold" 127.0.0.1 "$SRV_PORT" "$@" >"$T/long.out" 2>"$T/long.err" &
    local pid=$! seen=0 end
    _pids+=("$pid")
    WAIT_S=10 h_wait_for grep -qs connected "$T/long.out" || h_fail "$name: the holder did not connect"
    # until 1 s before it closes: "connected" may be seen late on a loaded machine
    end=$(( $(date +%s%N) / 1000000 + 3 * lease - 1000 ))
    while [ $(( $(date +%s%N) / 1000000 )) -lt $end ]; do
        [ "$(h_holders s)" -eq 1 ] || h_fail "$name: the holder vanished from redis after $seen checks"
        seen=$((seen + 1)); sleep 0.1
    done
    # renewed: its acquire time is in Redis now (lua/renew.lua)
    [ "$(h_rcli hlen 'conncap:{s}:since')" = 1 ] || h_fail "$name: no acquire time after renewals"
    wait $pid || h_fail "$name: the holder failed: $(cat "$T/long.err")"
    [ "$(tasks "$T/long.out")" -ge 2 ] || h_fail "$name: a permit held for 3 leases started no heartbeat"
    h_holders_is s 0 || WAIT_S=5 h_wait_for h_holders_is s 0 || h_fail "$name: the permit was not given back"
    # the release of a renewed permit takes its acquire time too
    [ "$(h_rcli exists 'conncap:{s}:since')" = 0 ] || h_fail "$name: the acquire time was left behind"
    h_note "$name: held $((3 * lease)) ms (lease $lease), present at each of $seen checks, $(tasks "$T/long.out") tasks"
}
held_throughout "silent holder" -- $((3 * lease)) 0
held_throughout "lazy, working holder" CONNCAP_HEARTBEAT=lazy -- $((3 * lease)) 100
held_throughout "lazy, silent holder in an older process" CONNCAP_HEARTBEAT=lazy -- $((3 * lease)) 0 $((lease / 2))
echo ok
