# queue_scale.sh -- thousands of queued connects (issue 23) in one process: an asyncio, node or Java
# program opening 2000 connections to a capped destination queues them from its event loop, so the cost
# of each connect() is paid in the loop. It must not grow with the number already queued (each swap
# read the fdinfo of every epoll set, whose size is the number of registered sockets: the loop then
# stalled for seconds). The last tenth of 2000 connects must cost at most 4 x the first tenth + 0.5 ms
# each. No holder, ticket or :waiters entry is left in Redis after (the 2000 waits end early, closed:
# their releases take their :waiters entries too).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
if [ -n "${SAN:-}" ]; then
    echo "skipped under SAN=$SAN: a cost measurement (a sanitizer multiplies the cost of every list walk)"
    exit 77
fi
QB_WAIT_MS=120000
qb_setup
QB_TIMEOUT=120 qb_run many 2000
h_note "2000 queued connects: $(qb_fact many connects); $(qb_fact many mean-us)"
QB_CLEAN_S=20 qb_clean many
qb_done
