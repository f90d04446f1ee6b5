# queue_exit_tickets.sh -- a process that closes its queued connects (issue 23) and exits at once leaves
# no ticket in the semaphore's queue: each closed one's wait ends in its own thread and gives its
# ticket back, and the exit gives back those of the waits still listed. A wait that had left the list
# but not yet written its release was covered by neither, and its ticket blocked the queue for up to
# 5/3 of a ticket's TTL (50 s with the default lease). Ten runs (300 connects, 600 the last two), each
# checked within 3 s; no holder and no :waiters entry left either (release.lua takes a giving-up
# waiter's with its ticket; before, it stayed until the wait's would-be end, 60 s here).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
QB_WAIT_MS=60000
qb_setup
no_ticket() { [ "$(h_rcli zcard 'conncap:{qb}:queue')" -eq 0 ] && [ "$(h_rcli zcard 'conncap:{qb}:holders')" -eq 0 ] && [ "$(h_rcli zcard 'conncap:{qb}:waiters')" -eq 0 ]; }
left=()
for n in 300 300 300 300 300 300 300 300 600 600; do
    qb_run close-exit $n
    WAIT_S=3 h_wait_for no_ticket || qb_bad "$n queued connects closed, then exit: $(h_rcli zcard 'conncap:{qb}:queue') ticket(s), $(h_rcli zcard 'conncap:{qb}:waiters') waiter(s) and $(h_rcli zcard 'conncap:{qb}:holders') holder(s) left"
    left+=("$(h_rcli zcard 'conncap:{qb}:queue')")
    h_rcli del 'conncap:{qb}:queue' 'conncap:{qb}:qexp' 'conncap:{qb}:holders' 'conncap:{qb}:waiters' >/dev/null
done
h_note "tickets left after each run: ${left[*]}"
qb_done
