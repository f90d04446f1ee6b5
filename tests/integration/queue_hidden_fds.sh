# queue_hidden_fds.sh -- a program may close numbers it did not open while a connect is queued (issue
# 23): close_range() of everything above its socket, or a close() of each (a /proc/self/fd walk), as
# the README allows for the shim's Redis descriptor. The shim keeps descriptors of its own for a queued
# connect (the kept socket, the placeholder, an eventfd, the listener); the program's files that then
# get those numbers must never be closed or written to by the shim, and the queued connect must still
# complete. Nothing is left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
qb_setup
qb_run hidden
h_note "after close_range above the queued socket: $(qb_fact hidden closed-behind-our-back) of the program's descriptors closed by the shim, $(qb_fact hidden bytes-written-to-our-file) bytes written to its file; the connect: $(qb_fact hidden q-soerror)"
qb_clean hidden
# the same when the program closes each number above its socket (a /proc/self/fd walk, a close loop)
qb_run hidden-walk
h_note "after a close() of each number above the queued socket: $(qb_fact hidden-walk closed-behind-our-back) closed by the shim, $(qb_fact hidden-walk bytes-written-to-our-file) bytes written; the connect: $(qb_fact hidden-walk q-soerror)"
qb_clean hidden-walk
qb_done
