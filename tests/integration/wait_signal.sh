# wait_signal.sh -- a signal during a blocking connect()'s wait for a permit: EINTR without SA_RESTART (the connect goes on as a real interrupted one: poll, connect() again, close), the wait goes on with SA_RESTART or the signal blocked.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" api 1 5000 8000 "127.0.0.1:$SRV_PORT"
q() { h_rcli zcard 'conncap:{api}:queue'; }
queue_empty() { [ "$(q)" -eq 0 ]; }
bad=()
finish() {
    [ ${#bad[@]} -eq 0 ] && { echo ok; exit 0; }
    printf 'FAIL: %s\n' "${bad[@]}" >&2
    exit 1
}

# the one permit, held by another process until told
mkfifo "$T/h.in"
hold_start() {
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/h.in" >"$T/h.out" &
    holder=$!
    exec 7>"$T/h.in"
    WAIT_S=5 h_wait_for h_holders_is api 1 || h_fail "the holder got no permit"
}
hold_end() { exec 7>&-; wait "$holder"; }
hold_end_in() { (sleep "$1"; exec 7>&-) & exec 7>&-; }

# run MODE: starts sigwait MODE as a coprocess (its pipes copied: bash
# forgets a coprocess's own when it ends); done: its end
run() {
    coproc SW { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" exec "$PROGS/sigwait" "$1" 127.0.0.1 "$SRV_PORT" 2>"$T/sw.err" 7>&-; }
    sw_pid=$SW_PID
    _pids+=("$sw_pid")
    exec {sw_out}<&"${SW[0]}" {sw_in}>&"${SW[1]}"
    mode=$1
}
done_() {
    exec {sw_in}>&-
    wait "$sw_pid" 2>/dev/null
    exec {sw_out}<&-
}
# upto NAME: the program's lines up to "@NAME" (or its end) into $out
upto() {
    local line
    out=""
    while read -r -t 20 -u "$sw_out" line; do
        [ "$line" = "@$1" ] && return 0
        out="$out$line"$'\n'
    done
    [ "$1" = end ] && return 0
    bad+=("$mode: no @$1 (got: $(echo $out))")
    finish
}
go() { echo go >&"$sw_in"; }
# field KEY N: the Nth word after KEY on its line in $out
field() { awk -v k="$1" -v n="$2" '$1 == k { print $(n + 1); exit }' <<<"$out"; }
near() { [ -n "$1" ] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }

# --- no SA_RESTART: EINTR at the signal, the connect goes on queued ---
hold_start
run intr
upto queued
h_note "intr: $(echo $out)"
ms=$(awk '$1 == "first" && $2 == "eintr" { print $3 }' <<<"$out")
near "$ms" 250 1000 || bad+=("intr: want EINTR about 300 ms into the wait, got: $(echo $out)")
# a real interrupted connect: not writable yet, no error, no peer
[ "$(field state 1) $(field state 2) $(field state 3)" = "0 0 -107" ] ||
    bad+=("intr: after EINTR want 'state 0 0 -107' (not ready, SO_ERROR 0, ENOTCONN), got $(grep ^state <<<"$out")")
[ "$(q)" -eq 1 ] || bad+=("intr: the interrupted connect's ticket is not in the queue ($(q))")
go
upto retry
ms=$(awk '$1 == "retry" && $2 == "eintr" { print $3 }' <<<"$out")
near "$ms" 250 1000 || bad+=("intr: connect() again: want it to wait and be interrupted again, got: $(echo $out)")
t0=$(date +%s%N)
hold_end_in 0.5
go
upto end
h_note "intr: $(echo $out)"
set -- $(grep '^retry connected' <<<"$out")
[ "${4:-}" = "$SRV_PORT" ] && near "$3" 300 3000 ||
    bad+=("intr: connect() again on the blocking socket: want it to wait for the freed permit and connect, got: $(echo $out)")
[ "$(field again 1)" = EISCONN ] || bad+=("intr: connect() once more: want EISCONN, got: $(grep ^again <<<"$out")")
done_
wait "$holder"
WAIT_S=5 h_wait_for h_holders_is api 0 || bad+=("intr: $(h_holders api) holders left")
queue_empty || bad+=("intr: $(q) tickets left")

# --- SA_RESTART, and a blocked signal: the wait goes on ---
for m in restart blocked; do
    hold_start
    run "$m"
    upto armed
    hold_end_in 1.2
    go
    upto end
    h_note "$m: $(echo $out)"
    set -- $(grep '^connected' <<<"$out")
    near "${2:-}" 1000 3000 || bad+=("$m: want the wait to go on until the permit came (about 1200 ms), got: $(echo $out)")
    want=1
    [ "$m" = blocked ] && want=0
    [ "${3:-}" = "$want" ] || bad+=("$m: the handler ran ${3:-?} times while it waited, want $want")
    done_
    wait "$holder"
    WAIT_S=5 h_wait_for h_holders_is api 0 || bad+=("$m: $(h_holders api) holders left")
done

# --- EINTR, then the program gives up: close() gives the ticket back at once ---
hold_start
run close
upto closed
h_note "close: $(echo $out)"
WAIT_S=1 h_wait_for queue_empty || bad+=("close: the ticket stayed in the queue after close() ($(q))")
go
upto end
done_

# --- EINTR, then poll(POLLOUT) and SO_ERROR, as Python does ---
run poll
upto polling
hold_end_in 0.5
go
upto end
h_note "poll: $(echo $out)"
set -- $(grep '^polled' <<<"$out")
[ "${3:-} ${4:-} ${5:-}" = "4 0 $SRV_PORT" ] && near "${2:-}" 300 3000 ||
    bad+=("poll: want POLLOUT (4) when the freed permit let it connect, SO_ERROR 0 and the peer, got: $(echo $out)")
done_
wait "$holder"

# --- EINTR in a thread, then its connect() again waits and is cancelled ---
hold_start
run cancel
upto cancelled
h_note "cancel: $(echo $out)"
grep -q '^first eintr' <<<"$out" || bad+=("cancel: the thread's connect was not interrupted: $(echo $out)")
near "$(field cancelled 1)" 0 200 || bad+=("cancel: connect() again did not end cancelled at once: $(echo $out)")
WAIT_S=1 h_wait_for queue_empty || bad+=("cancel: the ticket stayed in the queue after close() ($(q))")
go
upto end
done_
hold_end
# countserver stops counting a connection whose client closed before the
# next accept (tests/integration/countserver_closed_peer.sh), so a permit
# handed over at once shows as one
max=$(h_server_stat max)
[ "$max" -le 1 ] || bad+=("the upstream saw $max connections at once at a limit of 1")
WAIT_S=5 h_wait_for h_holders_is api 0 || bad+=("$(h_holders api) holders left at the end")
finish
