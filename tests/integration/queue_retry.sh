# queue_retry.sh -- after a queued connect (issue 23) ended without connecting -- it timed out, or the
# program shut it down -- the descriptor is still the program's socket: connect() again (a retry on the
# same socket, which Linux allows and the README promises takes no second permit) must use the address
# the program bound it to and the options it set before the first connect, not the shim's placeholder
# (bound to 127.0.0.1, TCP_SYNCNT 127, TCP_USER_TIMEOUT of the queue's). Nothing is left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
QB_WAIT_MS=2000
qb_setup
qb_run retry-timeout $QB_WAIT_MS
h_note "retry after a timeout: from $(qb_fact retry-timeout retry-source); $(qb_fact retry-timeout retry-options)"
qb_clean retry-timeout
qb_run retry-shutdown
h_note "retry after a shutdown: from $(qb_fact retry-shutdown retry-source); $(qb_fact retry-shutdown retry-options)"
qb_clean retry-shutdown
qb_done
