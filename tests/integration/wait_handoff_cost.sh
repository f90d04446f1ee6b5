# wait_handoff_cost.sh -- connect loops on a full semaphore: each wait costs one BLPOP and no poke (MONITOR).
# A woken waiter takes its permit and leaves; its process's next wait must
# not find the waker still blocked on the old wake list (a poke: LPUSH +
# PEXPIRE on the shared connection, and a second BLPOP, per wait).
. "$(dirname "$0")/../lib/harness.sh"
h_connloop_monitored 12 6
# commands the clients sent (not the ones scripts ran), per wait (acquires refused)
waits=$(h_rcli hget 'conncap:{api}:stats' denied)
blpop=$(grep -c '^[0-9.]* \[[0-9]* unix:[^]]*\] "BLPOP"' "$T/monitor")
pokes=$(grep -c '^[0-9.]* \[[0-9]* unix:[^]]*\] "LPUSH"' "$T/monitor")
h_note "waits $waits: BLPOP $blpop, pokes $pokes"
[ "${waits:-0}" -ge 20 ] || h_fail "too few waits to judge: ${waits:-0}"
per_wait=$(awk -v b="$blpop" -v p="$pokes" -v w="$waits" 'BEGIN {printf "%.2f BLPOP, %.2f pokes", b / w, p / w}')
awk -v b="$blpop" -v p="$pokes" -v w="$waits" 'BEGIN {exit !(b <= 1.3 * w && p <= 0.15 * w)}' \
    || h_fail "per wait: $per_wait (want <= 1.3, <= 0.15)"
echo ok
