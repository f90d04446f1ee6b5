# queue_blocking_grant.sh -- when the permit of a queued connect (issue 23) comes, the shim starts the
# real connect with the queue locked; the socket's flags are the program's, and a program that made it
# blocking while queued (cleared O_NONBLOCK, or ioctl FIONBIO) must not turn that connect into a wait:
# against a destination that does not answer (a listener with a full accept queue), a close() of
# another queued descriptor must still return at once, not after the connect's SYN retries.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
"$PROGS/qbreak" slow-listener "$T/slow.port" 2>"$T/slow.err" &
_pids+=("$!")
h_wait_file "$T/slow.port" || h_fail "the slow listener did not start"
SLOW=$(cat "$T/slow.port")
qb_setup "127.0.0.1:$SLOW"
qb_run blocking-grant "$SLOW"
h_note "close() of a queued descriptor while the shim connects a blocking one: $(qb_fact blocking-grant b-close-ms) ms"
qb_clean blocking-grant
qb_done
