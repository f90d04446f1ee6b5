# queue_blocking_connect.sh -- a program that clears O_NONBLOCK on a socket whose connect is queued
# (issue 23) and calls connect() again (the "connect, then wait in connect()" pattern) gets what a slow
# connect gives: the blocking connect() waits until the socket connects and returns 0. Not EALREADY at
# once (that is the non-blocking answer). Nothing is left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
qb_setup
qb_run blocking-connect
h_note "blocking connect() on a queued socket: $(qb_fact blocking-connect blocking-connect) after $(qb_fact blocking-connect blocking-ms) ms (the permit came after 1 s)"
qb_clean blocking-connect
qb_done
