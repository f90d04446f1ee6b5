# queue_stress.sh -- many queued non-blocking connects at once (issue 23; limit 2, 50 sockets from 5
# threads, all queued behind two holders) with, while queued: close(), syscall(SYS_close) and a close the
# shim cannot see followed by reuse of the number (a pipe, a file, a new socket), dup2() of a pipe over the
# descriptor, dup() and F_DUPFD_CLOEXEC copies, fork(); then exec() while queued. No event on a wrong
# socket, no descriptor of the program replaced, every copy of a queued descriptor on the real socket once
# connected (with its own descriptor flags), the fork child's copy fails within the wait timeout while the
# parent's connect goes on, the new image sees its connect fail; no holder, waiter or ticket left in Redis.
# (tests/progs/qready.c, modes stress and execq, says what it checks.)
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
"$PROGS/qready" echo "$T/echo.port" 2>"$T/echo.err" &
_pids+=("$!")
h_wait_file "$T/echo.port" || h_fail "the echo upstream did not start"
UP=$(cat "$T/echo.port")
wait_ms=10000
h_conf "$T/s.conf" qs 2 30000 $wait_ms "127.0.0.1:$UP"
exec_wait_ms=3000
h_conf "$T/e.conf" qs 2 30000 $exec_wait_ms "127.0.0.1:$UP"

all_clean() {
    local k
    for k in holders waiters queue qexp; do [ "$(h_rcli zcard "conncap:{qs}:$k")" -eq 0 ] || return 1; done
}
fact() { sed -n "s/^$2 //p" "$1" | tail -n 1; }
fails=()
bad() { fails+=("$*"); echo "FAIL: $*" >&2; }
want_fact() { # FILE KEY VALUE WHAT
    local v
    v=$(fact "$1" "$2")
    [ "$v" = "$3" ] || bad "$4 ($2 ${v:-missing}, want $3)"
}
clean_after() { # WHAT: no holder, no waiter, no ticket left (one deadline for all, well before the waits'
    local k          # own ends: a :waiters entry left behind would expire by itself only then)
    WAIT_S=3 h_wait_for all_clean && return 0
    for k in holders waiters queue qexp; do
        [ "$(h_rcli zcard "conncap:{qs}:$k")" -eq 0 ] ||
            bad "$1: $(h_rcli zcard "conncap:{qs}:$k") entries left in $k: $(h_rcli zrange "conncap:{qs}:$k" 0 2 | paste -sd' ')"
    done
}

# 1. the stress
t0=$SECONDS
TMPDIR="$T" LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/s.conf" timeout 40 "$PROGS/qready" stress "$UP" 5 10 $wait_ms 2 \
    >"$T/stress.out" 2>"$T/stress.err"
rc=$?
o="$T/stress.out"
h_note "stress: exit $rc after $((SECONDS - t0)) s; $(fact "$o" connect-inprogress) of $(fact "$o" connects) connects queued, $(fact "$o" ok) of $(fact "$o" want-ok) echoed, drained $(fact "$o" drained-ms) ms after the holders let go"
h_note "stress: $(fact "$o" closed-queued) closed while queued ($(fact "$o" raw-closed) raw, the number reused by the next descriptor $(fact "$o" raw-closed-number-reused) times), $(fact "$o" bystanders) bystander descriptors, $(fact "$o" fork-children) fork children"
grep '^fork-child ' "$o" | sed 's/^/  /' >&2
[ "$(fact "$o" connects)" -gt 0 ] 2>/dev/null || bad "stress: no connect made (exit $rc): $(tail -n 2 "$T/stress.err")"
[ "$(fact "$o" connect-inprogress)" = "$(fact "$o" connects)" ] ||
    bad "stress: $(fact "$o" connect-other) of $(fact "$o" connects) connects were not queued (EINPROGRESS); the first said $(fact "$o" first-other-connect)"
[ "$(fact "$o" ok)" = "$(fact "$o" want-ok)" ] || bad "stress: $(fact "$o" ok) of $(fact "$o" want-ok) sockets connected and echoed"
want_fact "$o" bad-events 0 "stress: an event reported on a socket while connecting or an error/hang-up"
want_fact "$o" soerr-bad 0 "stress: a socket writable with an SO_ERROR"
want_fact "$o" wrong-socket 0 "stress: a descriptor connected to another socket than the one the program made"
want_fact "$o" dup-not-real 0 "stress: a copy of a queued descriptor not on the real socket, or flags changed"
want_fact "$o" peer-bad 0 "stress: a connected socket with another peer than the upstream"
want_fact "$o" echo-bad 0 "stress: an echo that was not the socket's own tag"
want_fact "$o" unfinished 0 "stress: a socket that never became writable"
want_fact "$o" replaced 0 "stress: a descriptor of the program's that was not its queued socket was replaced"
want_fact "$o" bystander-junk 0 "stress: a pipe or file of the program's got data or events it did not put there"
want_fact "$o" closed-after-ready 0 "stress: a close meant for a queued socket found it connected"
want_fact "$o" fork-children-bad 0 "stress: a fork child's copy did not fail within the wait timeout"
want_fact "$o" low-sockets 0 "stress: sockets left below 512 after the program closed all of its own"
want_fact "$o" sigpipe 0 "stress: SIGPIPE"
[ $rc -eq 0 ] || bad "stress: exit $rc (result $(fact "$o" result)) $(grep -m1 FAIL "$T/stress.err")"
grep -q 'ThreadSanitizer\|AddressSanitizer\|LeakSanitizer' "$T/stress.err" && bad "stress: a sanitizer report (see stress.err)"
clean_after stress

# 2. exec while queued
t0=$SECONDS
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/e.conf" timeout 25 "$PROGS/qready" execq "$UP" $exec_wait_ms 2 \
    >"$T/exec.out" 2>"$T/exec.err"
rc=$?
o="$T/exec.out"
h_note "exec: exit $rc after $((SECONDS - t0)) s; connects $(fact "$o" exec-connect), $(fact "$o" exec-connect-cloexec) (SOCK_CLOEXEC)"
[ -n "$(fact "$o" exec-ready)" ] &&
    h_note "exec: the new image saw $(fact "$o" exec-ready) $(fact "$o" exec-fail-ms) ms after the connect, SO_ERROR $(fact "$o" exec-soerr) then $(fact "$o" exec-soerr2)"
want_fact "$o" exec-connect EINPROGRESS "exec: the connect was not queued"
want_fact "$o" exec-connect-cloexec EINPROGRESS "exec: the SOCK_CLOEXEC connect was not queued"
if [ "$(fact "$o" exec-connect)" = EINPROGRESS ]; then
    want_fact "$o" exec-cloexec-socket EBADF "exec: the SOCK_CLOEXEC queued socket survived the exec"
    case "$(fact "$o" exec-ready)" in *ERR* | *HUP*) ;; *) bad "exec: the new image's queued descriptor reported $(fact "$o" exec-ready), want ERR or HUP" ;; esac
    case "$(fact "$o" exec-soerr)" in 0 | "" | getsockopt-failed) bad "exec: SO_ERROR $(fact "$o" exec-soerr) in the new image" ;; esac
    want_fact "$o" exec-soerr2 0 "exec: the second SO_ERROR"
    ms=$(fact "$o" exec-fail-ms)
    [ "${ms:-99999}" -le $((exec_wait_ms + 2000)) ] || bad "exec: the failure came ${ms:-never} ms after the connect (wait_timeout_ms $exec_wait_ms)"
    want_fact "$o" exec-bystander intact "exec: the program's pipe changed across the exec"
fi
[ $rc -eq 0 ] || bad "exec: exit $rc (result $(fact "$o" result)) $(grep -m1 FAIL "$T/exec.err")"
grep -q 'ThreadSanitizer\|AddressSanitizer\|LeakSanitizer' "$T/exec.err" && bad "exec: a sanitizer report (see exec.err)"
clean_after exec

kill -0 "${_pids[-1]}" 2>/dev/null || h_fail "the echo upstream died"
[ ${#fails[@]} -eq 0 ] || h_fail "${#fails[@]} problem(s); the first: ${fails[0]}"
echo ok
