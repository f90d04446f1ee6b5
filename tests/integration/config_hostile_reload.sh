# config_hostile_reload.sh -- hot reload to configurations libconfig cannot read (an @include of a directory, a
# FIFO, /proc/self/mem; a FIFO as the file; 4 MiB): the running program keeps running with the rules in force,
# each is logged once with file and line, and later good edits still apply (the watch thread never blocks).
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 300
mkdir "$T/dir"
mkfifo "$T/fifo"
R="redis = { socket = \"$REDIS_SOCK\"; connect_timeout_ms = 300; command_timeout_ms = 500; };
log_level = \"info\";"
good() { # LIMIT: a good file, replaced atomically
    printf '%s\nsemaphores = ( { name = "a"; limit = %d; lease_ms = 5000; wait_timeout_ms = 30000; } );
rules = ( { semaphore = "a"; match = ( "127.0.0.1:%d" ); } );\n' "$R" "$1" "$SRV_PORT" > "$T/c.conf.new"
    mv "$T/c.conf.new" "$T/c.conf"
}
bad() { # NAME TEXT WANT: a file that includes something unreadable; the rules stay, one log line
    local name=$1 want=$3 n
    printf '%s\n' "$2" > "$T/c.conf.new" && mv "$T/c.conf.new" "$T/c.conf"
    WAIT_S=20 h_wait_for grep -qF -- "$want" "$T/loop.err" || h_fail "$name: no log line with \"$want\""
    sleep 2.5 # more rounds of the watch thread: still one line
    kill -0 "$LOOP" 2>/dev/null || h_fail "$name: the program died: $(tail -n 3 "$T/loop.err")"
    n=$(grep -cF -- "$want" "$T/loop.err")
    [ "$n" -eq 1 ] || h_fail "$name: want one log line, got $n"
    for _ in $(seq 10); do [ "$(h_holders a)" -le "$LIMIT" ] || h_fail "$name: over $LIMIT holders"; sleep 0.1; done
    h_wait_for h_holders_is a "$LIMIT" || h_fail "$name: the rules in force (limit $LIMIT) no longer apply"
    h_note "$name: kept limit $LIMIT, logged once"
}
raise() { # LIMIT: a good edit applies
    LIMIT=$1
    good "$LIMIT"
    WAIT_S=20 h_wait_for h_holders_is a "$LIMIT" || h_fail "limit $LIMIT not applied (holders $(h_holders a))"
    h_note "limit $LIMIT applied"
}
LIMIT=1
good 1
rm -f "$T/stop"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/nameloop" 127.0.0.1 "$SRV_PORT" 6 "$T/stop" >"$T/loop.out" 2>"$T/loop.err" &
LOOP=$!; _pids+=("$LOOP")
WAIT_S=20 h_wait_for h_holders_is a 1 || h_fail "start: never capped at 1: $(cat "$T/loop.err")"

bad incdir "$R
@include \"$T/dir\"" "reload failed, keeping the rules in force: $T/c.conf:3: @include \"$T/dir\": $T/dir: cannot open: Is a directory"
bad incfifo "$R
# a FIFO nobody writes to

@include \"fifo\"" "reload failed, keeping the rules in force: $T/c.conf:5: @include \"fifo\": $T/fifo: is a FIFO"
raise 2
bad incmem "$R
@include \"/proc/self/mem\"" "reload failed, keeping the rules in force: $T/c.conf:3: @include \"/proc/self/mem\": /proc/self/mem: cannot read"
# the file itself replaced by a FIFO, then by 4 MiB
mv "$T/fifo" "$T/c.conf"
WAIT_S=20 h_wait_for grep -qF "reload failed, keeping the rules in force: $T/c.conf: is a FIFO, not a regular file" \
    "$T/loop.err" || h_fail "fifo: no log line"
raise 3
python3 -c 'import sys; sys.stdout.write("a = \"" + "x" * (4 << 20) + "\";\n")' > "$T/c.conf.new"
mv "$T/c.conf.new" "$T/c.conf"
WAIT_S=20 h_wait_for grep -qF "reload failed, keeping the rules in force: $T/c.conf: is larger than 1048576 bytes" \
    "$T/loop.err" || h_fail "huge: no log line"
raise 4

touch "$T/stop"
wait "$LOOP"; rc=$?
[ $rc -eq 0 ] || h_fail "nameloop exited $rc: $(tail -n 3 "$T/loop.err")"
grep -q 'failed 0' "$T/loop.out" || h_fail "connects failed: $(cat "$T/loop.out")"
max=$(h_server_stat max)
[ "$max" -le 4 ] || h_fail "the server saw $max at once, over the highest limit 4"
h_note "program exited 0: $(cat "$T/loop.out"); server max $max"
