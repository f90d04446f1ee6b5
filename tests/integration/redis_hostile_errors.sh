# redis_hostile_errors.sh -- every "cannot serve now" error reply (too many clients, OOM, DENIED, NOAUTH, LOADING, ...) opens the one circuit breaker: a few Redis connections and one log line per outage, not one per connect.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/fakeredis.sh"
h_server_start 0
check() { # ERROR-TEXT [--close]
    local text=$1; shift
    fr_start --mode error --text "$text" "$@"
    fr_conf "$T/c.conf" api 0 "127.0.0.1:$SRV_PORT"
    # 150 connects, 10 ms apart (about 2.5 s)
    fr_measure loop 30 env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/failclient" try 127.0.0.1 "$SRV_PORT" 150 10
    local conns cmds lines refused
    conns=$(fr_stat conns) cmds=$(fr_stat cmds)
    lines=$(grep -c 'conncap\[' "$T/loop.err")
    refused=$(grep -c '^ECONNREFUSED ' "$T/loop.out")
    h_note "\"$text\" $*: $conns connections, $cmds commands, $lines log lines, $refused/150 refused, $M_MS ms"
    [ "$M_RC" -eq 0 ] || h_fail "\"$text\": the program exited $M_RC"
    [ "$refused" -eq 150 ] || h_fail "\"$text\": $refused of 150 connects refused (on_redis_down closed)"
    [ "$conns" -le 15 ] || h_fail "\"$text\": $conns Redis connections for 150 connects (no circuit breaker)"
    [ "$cmds" -le 15 ] || h_fail "\"$text\": $cmds Redis commands for 150 connects (no circuit breaker)"
    [ "$lines" -le 2 ] || h_fail "\"$text\": $lines log lines: $(head -5 "$T/loop.err")"
    grep -q "redis cannot serve (${text:0:12}" "$T/loop.err" || h_fail "\"$text\": the reason is not logged: $(head -3 "$T/loop.err")"
}
check "ERR max number of clients reached" --close
check "OOM command not allowed when used memory > 'maxmemory'."
check "DENIED Redis is running in protected mode because protected mode is enabled"
check "NOAUTH Authentication required."
check "WRONGPASS invalid username-password pair or user is disabled."
check "LOADING Redis is loading the dataset in memory"
check "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."
check "ERR Error running script (call to f_0123): @user_script:1: WRONGTYPE"

# Redis's error text reaches stderr as text: no escape sequence gets through
fr_start --mode error --text $'ERR \e[2J\e]0;pwned\a\e[31mred'
fr_conf "$T/c.conf" api 0 "127.0.0.1:$SRV_PORT"
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/failclient" try 127.0.0.1 "$SRV_PORT" 1 >"$T/esc.out" 2>"$T/esc.err"
h_note "escape sequences: $(cat "$T/esc.err")"
grep -q 'ERR \\x1b\[2J\\x1b\]0;pwned\\x07\\x1b\[31mred' "$T/esc.err" || h_fail "the error text is not logged escaped: $(od -c "$T/esc.err" | head)"
LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$T/esc.err" && h_fail "a control character reached stderr: $(od -c "$T/esc.err" | head)"

# a reply of the wrong type is logged with what was wrong
fr_start --mode status --text OK
fr_conf "$T/c.conf" api 0 "127.0.0.1:$SRV_PORT"
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/failclient" try 127.0.0.1 "$SRV_PORT" 1 >"$T/wt.out" 2>"$T/wt.err"
h_note "wrong type: $(cat "$T/wt.err")"
grep -q 'cannot serve (redis: acquire reply: a status' "$T/wt.err" || h_fail "no reason for a wrong-type reply: $(cat "$T/wt.err")"
echo ok
