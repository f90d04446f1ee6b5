# check_socket_user.sh -- `conncap check` says when the Redis Unix socket's modes keep some users out,
# and `--user NAME` tries the socket with NAME's rights: a daemon's workers after a privilege drop
# (nginx as www-data) reach Redis with their own rights, and one that cannot runs uncapped under
# on_redis_down = open, which a check run as root could not see before.
. "$(dirname "$0")/../lib/harness.sh"
[ "$(id -u)" = 0 ] || h_skip "needs root (--user takes another user's rights)"
h_redis_start
chmod 755 "$T"
cat > "$T/c.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; };
semaphores = ( { name = "a"; limit = 1; } );
rules = ( { semaphore = "a"; match = ( "127.0.0.1:1" ); } );
CONF
# the harness's socket is 0700 root's: a note names it, and check still passes for root
"$CLI" check -c "$T/c.conf" >"$T/out" 2>"$T/err" || h_fail "check as root: exit $?: $(cat "$T/err")"
grep -q "^conncap check: note: not every user may open the redis socket: $REDIS_SOCK is srwx------ root:" "$T/err" ||
    h_fail "no note that the socket keeps others out: $(cat "$T/err")"
grep -q "run uncapped (on_redis_down = open)" "$T/err" || h_fail "the note does not say what it costs: $(cat "$T/err")"
# nobody cannot: exit 2, and why
"$CLI" check -c "$T/c.conf" --user nobody >"$T/out" 2>"$T/err" && h_fail "check --user nobody passed on a 0700 socket"
grep -q "^conncap check: user nobody cannot connect to the redis socket $REDIS_SOCK: Permission denied" "$T/err" ||
    h_fail "check --user nobody: $(cat "$T/err")"
"$CLI" check --json -c "$T/c.conf" --user nobody >"$T/j" 2>/dev/null && h_fail "check --json --user nobody: exit 0"
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["socket"]
assert s["others"] is False and s["user"] == "nobody" and s["user_ok"] is False and s["user_errno"] == "EACCES", s' "$T/j" ||
    h_fail "check --json socket member: $(cat "$T/j")"
# a directory on the way that keeps others out is the one named
mkdir "$T/d" && chmod 700 "$T/d" && ln "$REDIS_SOCK" "$T/d/r.sock"
sed "s|$REDIS_SOCK|$T/d/r.sock|" "$T/c.conf" >"$T/d.conf"
chmod 777 "$REDIS_SOCK" "$T/d/r.sock"
"$CLI" check -c "$T/d.conf" --user nobody >/dev/null 2>"$T/err" && h_fail "check --user nobody passed through a 0700 directory"
grep -q "(${T}/d is drwx------ root:" "$T/err" || h_fail "the blocking directory is not named: $(cat "$T/err")"
# the socket's group lets nobody in: check agrees, and so does the shim run as nobody
chgrp nogroup "$REDIS_SOCK" && chmod 770 "$REDIS_SOCK"
"$CLI" check -c "$T/c.conf" --user nobody >"$T/out" 2>"$T/err" || h_fail "check --user nobody with the socket's group: exit $?: $(cat "$T/err")"
grep -q "^redis socket: user nobody can connect$" "$T/out" || h_fail "check --user nobody: $(cat "$T/out")"
setpriv --reuid=nobody --regid=nogroup --init-groups redis-cli -s "$REDIS_SOCK" ping | grep -q PONG ||
    h_fail "check said nobody can connect, redis-cli as nobody cannot"
"$CLI" check -c "$T/c.conf" --user no-such-user-here >/dev/null 2>"$T/err" && h_fail "check --user of no such user passed"
grep -q -- "--user no-such-user-here: no such user" "$T/err" || h_fail "unknown user: $(cat "$T/err")"
"$CLI" check --offline -c "$T/c.conf" --user nobody >/dev/null 2>"$T/err" && h_fail "--user with --offline passed"
echo ok
