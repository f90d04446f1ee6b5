# queue_epoll_sets.sh -- the epoll registrations of a queued descriptor (issue 23) survive its swaps
# whatever else the sets hold: with 257 epoll sets alive (one selector per thread or per client is
# common in Java and C servers) the socket, added edge-triggered before connect as nginx does, reports
# nothing while queued and one OUT once connected, never the unconnected socket's OUT|HUP; and a set
# that still holds an entry of another, still open file under the same number (closed without
# EPOLL_CTL_DEL while a dup or a fork child kept the file: epoll keys entries by file and number)
# keeps reporting the socket with the program's own events and data, registered once.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
qb_setup

qb_run epolls 1
qb_run epolls 257
h_note "257 epoll sets: connected $(qb_fact epolls ready-ms) ms after the release"
qb_clean epolls
qb_run stale-epoll 8
qb_clean stale-epoll
qb_done
