# queue_poll_cancel.sh -- threads cancelled while blocked in poll() and select() on a queued descriptor (both
# cancellation points): the call's eventfd and its place in the queue's lists go with it, so the grant's
# wake-up touches nothing of theirs, the connect completes, and no eventfd is left open. The same with the
# socket in the keeper (35 connects of a second semaphore queued first). Nothing left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
qb_setup
qb_run poll-cancel
h_note "own thread: $(qb_fact poll-cancel cancelled-eventfds) eventfds right after the cancels, $(qb_fact poll-cancel eventfds-left) after the grant"
qb_clean poll-cancel
qb_done
