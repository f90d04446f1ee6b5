# deepbind_php.sh -- PHP's curl is capped, though PHP loads php-curl (and libcurl with it) with RTLD_DEEPBIND: limit 4, one php-cli with 20 transfers in one curl_multi, 20 php-cli processes doing one curl_exec each, and php-fpm (20 workers) behind nginx under ab -n 100 -c 20.
# The upstream holds each connection 300 ms. Each run: every request
# succeeds (libcurl connects non-blocking: its excess connects queue), the
# upstream's concurrency reaches 4 and never exceeds it, it saw every
# request, no holder, ticket or waiter is left in Redis after. php-fpm and
# nginx are private instances (config, sockets, logs, pid files under $T),
# php-fpm under the shim, nginx not (it only talks FastCGI to php-fpm over a
# Unix socket); run as root, both keep root for their workers.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
command -v php >/dev/null && php -m 2>/dev/null | grep -qx curl ||
    { echo "skipped: php-cli with php-curl is not installed (mk/deps.sh test)"; exit 77; }
FPM=$(command -v php-fpm8.2 || ls /usr/sbin/php-fpm* 2>/dev/null | head -n 1)
h_redis_start
hold=300
CLIENT="$ROOT/tests/lib/clients/php_curl.php"
upstream() { # a fresh upstream and a configuration capping it at 4
    h_server_start $hold
    h_conf "$T/c.conf" php 4 10000 30000 "127.0.0.1:$SRV_PORT"
}

# ---- one php-cli, 20 transfers in one curl_multi
upstream
rc_run multi 60 "$CLI" run -c "$T/c.conf" -- php "$CLIENT" multi "http://127.0.0.1:$SRV_PORT/" 20
rc_all 20 30000
rc_cap 4
[ "$(h_server_stat total)" -eq 20 ] || h_fail "multi: the upstream saw $(h_server_stat total) connections, want 20"
rc_clean php

# ---- 20 php-cli processes at once, one curl_exec each
upstream
RC_LABEL=processes
pids=()
for i in $(seq 20); do
    timeout 60 "$CLI" run -c "$T/c.conf" -- php "$CLIENT" exec "http://127.0.0.1:$SRV_PORT/" \
        >"$T/exec.$i.out" 2>"$T/exec.$i.err" &
    pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
ok=$(cat "$T"/exec.*.out | grep -c '^ok 1 failed 0 ')
h_note "processes: $ok of 20 curl_exec answered 200, $failed php processes failed; upstream max $(h_server_stat max), total $(h_server_stat total)"
[ "$ok" -eq 20 ] || h_fail "processes: $ok of 20 got 200: $(cat "$T"/exec.*.out | grep -v '^ok 1 failed 0 ' | sort | uniq -c | head -n 3)"
[ "$failed" -eq 0 ] || h_fail "processes: $failed php processes failed: $(cat "$T"/exec.*.err | head -n 3)"
rc_cap 4
[ "$(h_server_stat total)" -eq 20 ] || h_fail "processes: the upstream saw $(h_server_stat total) connections, want 20"
rc_clean php

# ---- php-fpm behind nginx
if [ -z "$FPM" ] || ! command -v nginx >/dev/null || ! command -v ab >/dev/null; then
    h_note "php-fpm part skipped: php-fpm, nginx or ab (php-fpm, nginx-light, apache2-utils) not installed"
    echo ok
    exit 0
fi
upstream
RC_LABEL=php-fpm
F="$T/fpm"
mkdir -p "$F/logs" "$F/tmp"
root=$([ "$(id -u)" -eq 0 ] && echo 1 || echo 0)
cat > "$F/fpm.conf" <<FCONF
[global]
pid = $F/fpm.pid
error_log = $F/logs/fpm.log
daemonize = no
[capped]
listen = $F/fpm.sock
pm = static
pm.max_children = 20
$( [ $root = 1 ] && printf 'user = root\ngroup = root\n' )
FCONF
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FPM" -F -y "$F/fpm.conf" -p "$F" $( [ $root = 1 ] && echo -R ) \
    2>"$T/fpm.err" &
FPM_PID=$!
_pids+=("$FPM_PID")
WAIT_S=20 h_wait_for test -S "$F/fpm.sock" || h_fail "php-fpm did not start: $(tail -n 5 "$T/fpm.err" "$F/logs/fpm.log" 2>/dev/null)"
WAIT_S=20 h_wait_for bash -c "[ \$(pgrep -P $FPM_PID | wc -l) -eq 20 ]" || h_fail "php-fpm did not start 20 workers"
NP=$(h_free_port)
cat > "$F/nginx.conf" <<NCONF
daemon off;
master_process on;
worker_processes 2;
$( [ $root = 1 ] && echo "user root;" )
pid $F/nginx.pid;
error_log $F/logs/nginx-error.log info;
events { worker_connections 512; }
http {
    access_log $F/logs/access.log;
    client_body_temp_path $F/tmp/body;
    proxy_temp_path $F/tmp/proxy;
    fastcgi_temp_path $F/tmp/fastcgi;
    uwsgi_temp_path $F/tmp/uwsgi;
    scgi_temp_path $F/tmp/scgi;
    server {
        listen 127.0.0.1:$NP;
        location / {
            fastcgi_pass unix:$F/fpm.sock;
            fastcgi_read_timeout 60s;
            fastcgi_param SCRIPT_FILENAME $ROOT/tests/lib/clients/php_fpm_get.php;
            fastcgi_param QUERY_STRING \$query_string;
            fastcgi_param REQUEST_METHOD \$request_method;
            fastcgi_param SERVER_PROTOCOL \$server_protocol;
        }
    }
}
NCONF
nginx -p "$F/" -c "$F/nginx.conf" 2>"$T/nginx.err" &
NGINX=$!
_pids+=("$NGINX")
url="http://127.0.0.1:$NP/?u=http://127.0.0.1:$SRV_PORT/"
h_wait_for curl -s -o /dev/null "http://127.0.0.1:$NP/?u=http://127.0.0.1:1/" || h_fail "nginx does not answer: $(tail -n 3 "$F/logs/nginx-error.log")"
total0=$(h_server_stat total)
requests=100
timeout 120 ab -n $requests -c 20 "$url" >"$T/ab.out" 2>&1 || h_fail "ab failed: $(tail -n 5 "$T/ab.out")"
complete=$(sed -n 's/^Complete requests: *//p' "$T/ab.out")
failed=$(sed -n 's/^Failed requests: *//p' "$T/ab.out")
non2xx=$(sed -n 's/^Non-2xx responses: *//p' "$T/ab.out")
h_note "php-fpm: ab $complete complete, $failed failed, ${non2xx:-0} non-2xx in $(sed -n 's/^Time taken for tests: *//p' "$T/ab.out"); upstream max $(h_server_stat max), total $(( $(h_server_stat total) - total0 ))"
[ "$complete" = $requests ] && [ "$failed" = 0 ] && [ -z "$non2xx" ] ||
    h_fail "php-fpm: $complete of $requests complete, $failed failed, ${non2xx:-0} non-2xx: $(grep -h failed "$F"/logs/*.log | head -n 3)"
rc_cap 4
[ $(( $(h_server_stat total) - total0 )) -eq $requests ] || h_fail "php-fpm: the upstream saw $(( $(h_server_stat total) - total0 )) connections, want $requests"
rc_clean php
h_stop_pid "$NGINX" QUIT
h_stop_pid "$FPM_PID" QUIT
rc_clean php
echo ok
