# config_nginx_privdrop.sh -- a daemon whose workers drop privileges is capped (issue 24): the configuration and the secret
# it names are read when the shim is loaded, in nginx's master (root), before any worker runs as nobody.
# nginx, 4 workers as `nobody`, default settings (non-blocking connects queue), limit 4. The configuration
# is mode 0600 in a 0700 directory, the Redis password (requirepass) in a 0400 password_file beside it:
# a worker can neither read nor even stat either. Asserts, before and after `nginx -s reload` (which
# starts 4 new workers, pointed at a second counting server): every request answered 200, the
# upstream reaches 4 and never more, the holders are the workers' pids; each worker says once that it
# cannot watch the file for a hot reload, and never that the configuration is bad; nothing is left in
# Redis after quit.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
command -v nginx >/dev/null && command -v ab >/dev/null || { echo "skipped: nginx or ab (nginx-light, apache2-utils) not installed"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (nginx's master as root, its workers as nobody)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "skipped: no user nobody"; exit 77; }
PW="pw-$RANDOM$RANDOM"
REDISCLI_AUTH=$PW REDIS_EXTRA="--requirepass $PW" h_redis_start
h_rcli() { REDISCLI_AUTH=$PW redis-cli -s "$REDIS_SOCK" "$@"; } # the password stays out of the programs' environment
h_server_start 200
SRV1_PORT=$SRV_PORT SRV1_STATS=$SRV_STATS
h_server_start 200
SRV2_PORT=$SRV_PORT SRV2_STATS=$SRV_STATS
chmod 0711 "$T" # nginx's own directories below are the workers' to use; the secret one is not
S="$T/secret"
mkdir -m 0700 "$S"
printf '%s\n' "$PW" > "$S/pw"
chmod 0400 "$S/pw"
cat > "$S/c.conf" <<CONF
redis = { host = "127.0.0.1"; port = $REDIS_PORT; password_file = "$S/pw"; connect_timeout_ms = 300;
          command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "ngx"; limit = 4; lease_ms = 30000; wait_timeout_ms = 30000; } );
rules = ( { semaphore = "ngx"; match = ( "127.0.0.1:$SRV1_PORT", "127.0.0.1:$SRV2_PORT" ); } );
CONF
chmod 0600 "$S/c.conf"
su -s /bin/sh nobody -c "cat '$S/c.conf'" >/dev/null 2>&1 && h_fail "nobody can read the configuration: the test proves nothing"
NP=$(h_free_port)
N="$T/nginx"
mkdir -p "$N/logs" "$N/tmp"
nginx_conf() { # UPSTREAM-PORT
    cat > "$N/nginx.conf" <<NCONF
daemon off;
master_process on;
worker_processes 4;
user nobody nogroup;
pid $N/nginx.pid;
error_log $N/logs/error.log info;
events { worker_connections 512; }
http {
    access_log $N/logs/access.log;
    client_body_temp_path $N/tmp/body;
    proxy_temp_path $N/tmp/proxy;
    fastcgi_temp_path $N/tmp/fastcgi;
    uwsgi_temp_path $N/tmp/uwsgi;
    scgi_temp_path $N/tmp/scgi;
    upstream counted { server 127.0.0.1:$1 max_fails=0; }
    server {
        listen 127.0.0.1:$NP;
        location / { proxy_pass http://counted; }
    }
}
NCONF
}
ngx() { nginx -p "$N/" -c "$N/nginx.conf" "$@"; }
nginx_conf "$SRV1_PORT"
ngx -t >"$T/nginx-t.log" 2>&1 || h_fail "nginx -t: $(cat "$T/nginx-t.log")"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$S/c.conf" nginx -p "$N/" -c "$N/nginx.conf" 2>"$T/nginx.err" &
MASTER=$!
_pids+=("$MASTER")
WAIT_S=20 h_wait_for bash -c "[ \$(pgrep -P $MASTER | wc -l) -eq 4 ]" || h_fail "nginx did not start 4 workers: $(cat "$N/logs/error.log")"

# the shim's lines in nginx's stderr and error log, without their pids, counted
shim_said() {
    cat "$T/nginx.err" "$N/logs/error.log" | grep -o 'conncap\[[0-9]*\]: .*' | sed 's/^conncap\[[0-9]*\]: //' | sort | uniq -c
}

holding() { [ "$(h_holders ngx)" -ge 1 ]; }

# round NAME STATS: ab -n 120 -c 20 against the workers running now; every answer 200, capped at 4
round() {
    local name=$1 stats=$2 workers users requests=120 ok pids p
    workers=$(pgrep -P "$MASTER" | sort)
    users=$(ps -o user= -p "$(paste -sd, <<<"$workers")" | sort -u | paste -sd, -)
    [ "$users" = nobody ] || h_fail "$name: the workers run as '$users', want nobody"
    : >"$N/logs/access.log.$name"
    ab -n $requests -c 20 "http://127.0.0.1:$NP/" >"$T/ab.$name" 2>&1 &
    local ab=$!
    WAIT_S=10 h_wait_for holding
    h_rcli zrange 'conncap:{ngx}:holders' 0 -1 >"$T/holders.$name"
    timeout 90 tail --pid=$ab -f /dev/null
    wait $ab || h_fail "$name: ab failed: $(tail -n 5 "$T/ab.$name")"
    SRV_STATS=$stats
    ok=$(sed -n 's/^Complete requests: *//p' "$T/ab.$name")
    h_note "$name: workers ($(paste -sd' ' <<<"$workers")) as $users; ab: $ok complete, $(sed -n 's/^Failed requests: *//p' "$T/ab.$name") failed, $(sed -n 's/^Non-2xx responses: *//p' "$T/ab.$name" | grep . || echo 0) non-2xx; upstream max $(h_server_stat max), total $(h_server_stat total)"
    h_note "$name: the shim said so far (count, line): $(shim_said | paste -sd'|' -)"
    [ "$ok" = $requests ] || h_fail "$name: ab completed $ok of $requests"
    grep -q '^Non-2xx' "$T/ab.$name" && h_fail "$name: some requests were not answered 200: $(grep -A1 '^Non-2xx' "$T/ab.$name")"
    RC_LABEL=$name rc_cap 4
    pids=$(cut -d/ -f2 "$T/holders.$name" | sort -u)
    [ -n "$pids" ] || h_fail "$name: no holder in Redis while ab ran"
    for p in $pids; do
        grep -qx "$p" <<<"$workers" || h_fail "$name: holder pid $p is not one of the workers ($workers)"
    done
}
round start "$SRV1_STATS"
old_workers=$(pgrep -P "$MASTER" | sort)
nginx_conf "$SRV2_PORT"
ngx -s reload 2>>"$T/nginx-signal.log" || h_fail "nginx -s reload failed: $(cat "$T/nginx-signal.log")"
WAIT_S=20 h_wait_for bash -c "[ \$(pgrep -P $MASTER | grep -vxF '$old_workers' | wc -l) -eq 4 ] && ! pgrep -P $MASTER | grep -qxF '$(head -n1 <<<"$old_workers")'" ||
    h_fail "the reload did not replace the workers"
round reloaded "$SRV2_STATS"
ngx -s quit 2>>"$T/nginx-signal.log" || h_fail "nginx -s quit failed"
h_wait_pid_gone "$MASTER" 20 || h_fail "nginx did not quit"
RC_LABEL=quit rc_clean ngx
said=$(shim_said)
grep -q 'bad configuration' <<<"$said" && h_fail "a worker found the configuration bad: $said"
# each worker that connected said once that it cannot watch the file
for p in $(cat "$T/holders.start" "$T/holders.reloaded" | cut -d/ -f2 | sort -u); do
    n=$(cat "$T/nginx.err" "$N/logs/error.log" | grep -c "conncap\[$p\]: .*hot reload")
    [ "$n" -eq 1 ] || h_fail "worker $p said $n times that it cannot reload the file, want once"
done
echo ok
