# queue_sigio.sh -- signal-driven sockets whose connect is queued (issue 26: the grant copies the signal
# owner after the SYN unless the socket is O_ASYNC): a socket set O_ASYNC, F_SETOWN and F_SETSIG before its
# connect gets its connection's SIGRTMIN when the permit comes, and each socket, given its owner before or
# while queued, reports the owner, signal and flags the program set once connected. Nothing left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
qb_setup
qb_run sigio
h_note "O_ASYNC socket: its connection signalled $(qb_fact sigio a-signal-ms) ms after the release"
qb_clean sigio
qb_done
