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
# a user that does not exist, or no name, is refused before anything is printed, whatever the address
cat > "$T/tcp.conf" <<CONF
redis = { host = "127.0.0.1"; port = 1; };
semaphores = ( { name = "a"; limit = 1; } );
rules = ( { semaphore = "a"; match = ( "127.0.0.1:1" ); } );
CONF
for spec in no-such-user-here "" 12x 1:; do
    for conf in c tcp; do
        "$CLI" check -c "$T/$conf.conf" --user "$spec" >"$T/out" 2>"$T/err" && h_fail "check -c $conf.conf --user '$spec' passed"
        [ -s "$T/out" ] && h_fail "check --user '$spec' printed before refusing it: $(cat "$T/out")"
        grep -q -- "--user $spec: " "$T/err" || h_fail "check --user '$spec': $(cat "$T/err")"
    done
done
# a uid (a container's --user), with a passwd entry or without one (then GID, default 0, no other groups)
"$CLI" check -c "$T/c.conf" --user "$(id -u nobody)" >"$T/out" 2>"$T/err" || h_fail "check --user UID of nobody: $(cat "$T/err")"
"$CLI" check -c "$T/c.conf" --user "4242:$(getent group nogroup | cut -d: -f3)" >/dev/null 2>"$T/err" ||
    h_fail "check --user 4242:nogroup's gid, socket of group nogroup: $(cat "$T/err")"
"$CLI" check -c "$T/c.conf" --user 4242 >/dev/null 2>"$T/err" && h_fail "check --user 4242 (gid 0) passed on a nogroup 0770 socket"
grep -q "^conncap check: user 4242 cannot connect to the redis socket $REDIS_SOCK: Permission denied ($REDIS_SOCK is srwxrwx--- root:nogroup)" "$T/err" ||
    h_fail "check --user 4242: $(cat "$T/err")"
# given --user, the note does not advise it again; with --json its error is on stderr all the same
chmod 700 "$REDIS_SOCK"
"$CLI" check -c "$T/c.conf" --user nobody >/dev/null 2>"$T/err"
grep -q "try one with --user" "$T/err" && h_fail "the note advises --user when it was given: $(cat "$T/err")"
"$CLI" check --json -c "$T/c.conf" --user nobody >/dev/null 2>"$T/err"
grep -q "^conncap check: user nobody cannot connect" "$T/err" || h_fail "check --json --user nobody said nothing on stderr"
# symlinks: the directories their targets go through are looked at too, and the first link is named
chmod 777 "$REDIS_SOCK"
mkdir -p "$T/open" "$T/locked" && chmod 755 "$T/open" && chmod 700 "$T/locked"
ln "$REDIS_SOCK" "$T/open/r.sock" && ln -s "$T/open" "$T/locked/link" && ln -s "$T/locked/link" "$T/outer"
sed "s|$REDIS_SOCK|$T/outer/r.sock|" "$T/c.conf" >"$T/l.conf"
"$CLI" check -c "$T/l.conf" >/dev/null 2>"$T/err" || h_fail "check (root) through symlinks: $(cat "$T/err")"
grep -q "note: not every user may open the redis socket: $T/locked is drwx------ root:[a-z]*, reached through the symlink $T/outer\." "$T/err" ||
    h_fail "no note of the directory a symlink goes through: $(cat "$T/err")"
"$CLI" check -c "$T/l.conf" --user nobody >/dev/null 2>"$T/err" && h_fail "check --user nobody passed through a 0700 directory behind a symlink"
grep -q "Permission denied ($T/locked is drwx------" "$T/err" || h_fail "check --user nobody through symlinks: $(cat "$T/err")"
ln -s "$T/locked/link/r.sock" "$T/sock-link"
sed "s|$REDIS_SOCK|$T/sock-link|" "$T/c.conf" >"$T/sl.conf"
"$CLI" check -c "$T/sl.conf" >/dev/null 2>"$T/err"
grep -q "$T/locked is drwx------ root:[a-z]*, reached through the symlink $T/sock-link\." "$T/err" ||
    h_fail "the socket as a symlink into a 0700 directory: $(cat "$T/err")"
# a file that is no socket is said to be one nobody can connect to
: >"$T/plain" && chmod 666 "$T/plain"
sed "s|$REDIS_SOCK|$T/plain|" "$T/c.conf" >"$T/p.conf"
"$CLI" check -c "$T/p.conf" >/dev/null 2>"$T/err" && h_fail "check passed on a plain file as the socket"
grep -q "note: $T/plain is -rw-rw-rw- root:[a-z]*, not a socket: nobody can connect to Redis there" "$T/err" ||
    h_fail "a plain file as the socket: $(cat "$T/err")"
# Redis unreachable: --json still prints its one object, redis_ok false, the socket's answer in it
sed "s|$REDIS_SOCK|$T/no-dir/r.sock|" "$T/c.conf" >"$T/n.conf"
"$CLI" check --json -c "$T/n.conf" --user nobody >"$T/j" 2>"$T/err" && h_fail "check --json with no socket: exit 0"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["redis_ok"] is False and d["functions"] is None and d["socket"]["user_errno"] == "ENOENT", d' "$T/j" ||
    h_fail "check --json with Redis unreachable: $(cat "$T/j") / $(cat "$T/err")"
echo ok
