# queue_blocking_io.sh -- a program that clears O_NONBLOCK on a socket whose connect is queued (issue
# 23) and then blocks in send() (or recv()) before the connect completed: on a slow connect the call
# waits for the connection and goes on. Under the queue the thread sleeps in the placeholder, and is
# not moved to the real socket by the swap: it must still send once the permit comes (the holder lets
# go after 1 s), not fail after wait_timeout_ms + 5 s.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
QB_WAIT_MS=4000
qb_setup
qb_run blocking-send
h_note "blocking send() on a queued socket: $(qb_fact blocking-send blocking-send) after $(qb_fact blocking-send blocking-ms) ms (the permit came after 1 s)"
qb_clean blocking-send
qb_done
