# real_nginx.sh -- Debian's nginx, 4 prefork workers, as a reverse proxy to the counting server, under the
# shim with no `env` directive (its workers get a cleared environment) and nonblocking = "fail" (opt-in: a
# connect beyond the cap fails at once, nginx answers 502; the default, which queues it, is queue_nginx.sh).
# Load from ab, `nginx -s reload` under load, `nginx -s quit`. Asserts: the cap holds and is reached; every
# request is answered, 200 or 502 (the fail-fast answer); the holders are the workers' own (their pids);
# no holder left after the reload's old workers exit, nor after quit.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
command -v nginx >/dev/null && command -v ab >/dev/null || { echo "skipped: nginx or ab (nginx-light, apache2-utils) not installed"; exit 77; }
h_redis_start
h_server_start 150
CONF_EXTRA='nonblocking = "fail";' h_conf "$T/c.conf" ngx 4 30000 2000 "127.0.0.1:$SRV_PORT"
NP=$(h_free_port)
N="$T/nginx"
mkdir -p "$N/logs" "$N/tmp"
cat > "$N/nginx.conf" <<NCONF
daemon off;
master_process on;
worker_processes 4;
$( [ "$(id -u)" -eq 0 ] && echo "user root;" )
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
    upstream counted { server 127.0.0.1:$SRV_PORT max_fails=0; }
    server {
        listen 127.0.0.1:$NP;
        location / { proxy_pass http://counted; }
    }
}
NCONF
ngx() { nginx -p "$N/" -c "$N/nginx.conf" "$@"; }
ngx -t >"$T/nginx-t.log" 2>&1 || h_fail "nginx -t: $(cat "$T/nginx-t.log")"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" nginx -p "$N/" -c "$N/nginx.conf" 2>"$T/nginx.err" &
MASTER=$!
_pids+=("$MASTER")
workers() { pgrep -P "$MASTER" | sort; }
WAIT_S=20 h_wait_for bash -c "[ \$(pgrep -P $MASTER | wc -l) -eq 4 ]" || h_fail "nginx did not start 4 workers: $(cat "$N/logs/error.log")"
h_wait_for curl -s -o /dev/null "http://127.0.0.1:$NP/" || h_fail "nginx does not answer"
old_workers=$(workers)

# ab: 16 at a time; the reload comes once a tenth of the requests were answered
requests=3000
ab -n $requests -c 16 "http://127.0.0.1:$NP/" >"$T/ab.out" 2>&1 &
AB=$!
h_wait_for bash -c "[ \$(wc -l <'$N/logs/access.log') -ge $((requests / 10)) ]" || h_fail "no load"
h_rcli zrange 'conncap:{ngx}:holders' 0 -1 >"$T/holders.during"
ngx -s reload 2>>"$T/nginx-signal.log" || h_fail "nginx -s reload failed: $(cat "$T/nginx-signal.log")"
wait $AB || h_fail "ab failed: $(tail -n 5 "$T/ab.out")"
complete=$(sed -n 's/^Complete requests: *//p' "$T/ab.out")
[ "$complete" = $requests ] || h_fail "ab completed $complete of $requests requests: $(cat "$T/ab.out")"
grep -q '^Failed requests: *0$' "$T/ab.out" || grep -q 'Length:' "$T/ab.out" ||
    h_fail "requests failed other than by length (a 502 body): $(grep -A3 '^Failed requests' "$T/ab.out")"
# every request answered: the access log has one line each, 200 or 502
ok=$(awk '$9 == 200' "$N/logs/access.log" | wc -l)
refused=$(awk '$9 == 502' "$N/logs/access.log" | wc -l)
other=$(awk '$9 != 200 && $9 != 502' "$N/logs/access.log" | wc -l)
max=$(h_server_stat max)
h_note "ab: $complete complete, $ok answered 200, $refused answered 502 (fail fast), $other other; upstream max concurrency $max"
[ "$other" -eq 0 ] || h_fail "answers other than 200 and 502: $(awk '$9 != 200 && $9 != 502' "$N/logs/access.log" | head -n 3)"
[ "$max" -le 4 ] || h_fail "cap exceeded: the upstream saw $max concurrent connections, limit 4"
[ "$max" -eq 4 ] || h_fail "the cap of 4 was never reached (max $max)"
[ "$ok" -ge 8 ] || h_fail "only $ok requests got through"
[ "$(wc -l <"$T/holders.during")" -ge 1 ] || h_fail "no holder seen during the load"
[ $((ok + refused)) -eq $((requests + 1)) ] || h_fail "$requests requests and a probe, but $((ok + refused)) answers logged"
grep -q 'connect() to .* failed' "$N/logs/error.log" || h_fail "no failed upstream connect in nginx's error log"
# the permits were the workers' own: their pids, never the master's
pids=$(grep . "$T/holders.during" | cut -d/ -f2 | sort -u)
for p in $pids; do
    grep -qx "$p" <<<"$old_workers" || h_fail "holder pid $p is not one of the workers ($old_workers); master $MASTER"
done
# the reload's old workers are gone, with their permits (the set itself: released, not expired)
WAIT_S=20 h_wait_for bash -c "! pgrep -P $MASTER | grep -qxF '$(head -n1 <<<"$old_workers")'" || h_fail "old workers still running"
WAIT_S=5 h_wait_for h_holders_is ngx 0 || h_fail "holders left after the reload: $(h_rcli zrange 'conncap:{ngx}:holders' 0 -1)"
# the new workers serve, capped, and quit cleanly
curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$NP/" | grep -q 200 || h_fail "the new workers do not serve"
ngx -s quit 2>>"$T/nginx-signal.log" || h_fail "nginx -s quit failed"
h_wait_pid_gone "$MASTER" 20 || h_fail "nginx did not quit"
WAIT_S=5 h_wait_for h_holders_is ngx 0 || h_fail "holders left after quit: $(h_rcli zrange 'conncap:{ngx}:holders' 0 -1)"
grep -q 'conncap' "$T/nginx.err" "$N/logs/error.log" && h_note "conncap said: $(grep -h conncap "$T/nginx.err" "$N/logs/error.log" | sort | uniq -c | head -n 5)"
echo ok
