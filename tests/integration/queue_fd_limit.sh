# queue_fd_limit.sh -- a non-blocking connect never waits inside connect() (issue 23), even when the
# queue cannot take it: at RLIMIT_NOFILE with one number free (the socket's), the shim cannot make its
# placeholder, listener and eventfd. connect() must return at once (in progress, or failed), not after
# wait_timeout_ms in the program's thread (an event loop stalled that long, and a loop that holds the
# permits would wait on itself). Nothing is left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
qb_setup
qb_run lastfd
h_note "RLIMIT_NOFILE reached: connect gave $(qb_fact lastfd connect) after $(qb_fact lastfd connect-ms) ms (wait_timeout_ms ${QB_WAIT_MS:-6000})"
qb_clean lastfd
qb_done
