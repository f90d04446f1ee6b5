# queue_nginx.sh -- under the default configuration (non-blocking connects queue), limit 4, nginx (4 workers, reverse proxy) answers all of ab -n 300 -c 20 with 200, no 502, through an `nginx -s reload` under that load, and its workers keep answering meanwhile.
# The upstream holds each connection 200 ms; nginx runs under the shim with
# no `env` directive (its workers get a cleared environment). Asserts: every
# request answered 200 (ab and the access log), no upstream error in nginx's
# log, the upstream's concurrency reaches 4 and never exceeds it; side
# probes: GETs to a location proxied to an uncapped upstream, sent while the
# capped one holds 4 and ab keeps 20 in flight (16 connects queued in the
# workers), before and after the reload, each answered 200 within 1.5 s; no
# holder, ticket or waiter left after the old workers exit, nor after quit.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
command -v nginx >/dev/null && command -v ab >/dev/null || { echo "skipped: nginx or ab (nginx-light, apache2-utils) not installed"; exit 77; }
h_redis_start
rc_free_server
h_server_start 200
h_conf "$T/c.conf" ngx 4 30000 30000 "127.0.0.1:$SRV_PORT"
RC_LABEL=nginx
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
    upstream free { server 127.0.0.1:$FREE_PORT max_fails=0; }
    server {
        listen 127.0.0.1:$NP;
        location / { proxy_pass http://counted; }
        location /free { proxy_pass http://free; }
    }
}
NCONF
ngx() { nginx -p "$N/" -c "$N/nginx.conf" "$@"; }
ngx -t >"$T/nginx-t.log" 2>&1 || h_fail "nginx -t: $(cat "$T/nginx-t.log")"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" nginx -p "$N/" -c "$N/nginx.conf" 2>"$T/nginx.err" &
MASTER=$!
_pids+=("$MASTER")
WAIT_S=20 h_wait_for bash -c "[ \$(pgrep -P $MASTER | wc -l) -eq 4 ]" || h_fail "nginx did not start 4 workers: $(cat "$N/logs/error.log")"
h_wait_for curl -s -o /dev/null "http://127.0.0.1:$NP/free" || h_fail "nginx does not answer"
old_workers=$(pgrep -P "$MASTER" | sort)

# probe N: one GET to the uncapped location; "N CUR CODE SECONDS" to $T/probes
# (CUR: the capped upstream's connections just before it)
probe() {
    local cur
    cur=$(h_server_stat cur)
    echo "$1 $cur $(curl -s -o /dev/null --max-time 10 -w '%{http_code} %{time_total}' "http://127.0.0.1:$NP/free")" >>"$T/probes"
}
requests=300
ab -n $requests -c 20 "http://127.0.0.1:$NP/" >"$T/ab.out" 2>&1 &
AB=$!
_pids+=("$AB")
capped_lines() { awk '$7 == "/"' "$N/logs/access.log" | wc -l; }
WAIT_S=20 h_wait_for bash -c "[ \$(awk '\$7 == \"/\"' '$N/logs/access.log' | wc -l) -ge 20 ]" || h_fail "no load"
for i in 1 2 3; do probe "$i"; sleep 0.3; done
ngx -s reload 2>>"$T/nginx-signal.log" || h_fail "nginx -s reload failed: $(cat "$T/nginx-signal.log")"
h_note "reload after $(capped_lines) of $requests requests"
for i in 4 5 6; do sleep 0.3; probe "$i"; done
timeout 90 tail --pid=$AB -f /dev/null
kill -0 $AB 2>/dev/null && h_fail "ab did not finish within 90 s ($(capped_lines) of $requests answered)"
wait $AB || h_fail "ab failed: $(tail -n 5 "$T/ab.out")"
complete=$(sed -n 's/^Complete requests: *//p' "$T/ab.out")
failed=$(sed -n 's/^Failed requests: *//p' "$T/ab.out")
non2xx=$(sed -n 's/^Non-2xx responses: *//p' "$T/ab.out")
ok=$(awk '$7 == "/" && $9 == 200' "$N/logs/access.log" | wc -l)
others=$(awk '$7 == "/" && $9 != 200 { print $9 }' "$N/logs/access.log" | sort | uniq -c | awk '{ printf "%s%sx%s", (NR > 1 ? "," : ""), $2, $1 }')
h_note "ab: $complete complete, $failed failed, ${non2xx:-0} non-2xx; access log: $ok answered 200, others: ${others:-none}; upstream max $(h_server_stat max), total $(h_server_stat total)"
h_note "probes (n, capped upstream's connections, code, seconds): $(paste -sd';' "$T/probes")"
[ "$complete" = $requests ] || h_fail "ab completed $complete of $requests requests"
[ "$ok" -eq $requests ] || h_fail "$ok of $requests requests answered 200 (others: ${others:-none})"
[ "$failed" = 0 ] && [ -z "$non2xx" ] || h_fail "ab: $failed failed, ${non2xx:-0} non-2xx"
grep -q 'upstream' "$N/logs/error.log" && h_fail "nginx logged upstream errors: $(grep upstream "$N/logs/error.log" | head -n 3)"
rc_cap 4
[ "$(h_server_stat total)" -eq $requests ] || h_fail "the upstream saw $(h_server_stat total) connections, want $requests"
# the probes: each answered at once; some while the capped upstream was full
[ "$(wc -l <"$T/probes")" -eq 6 ] || h_fail "probes: $(cat "$T/probes")"
awk '$3 != 200 || $4 > 1.5' "$T/probes" | grep -q . && h_fail "a probe of the uncapped location failed or was slow: $(awk '$3 != 200 || $4 > 1.5' "$T/probes")"
[ "$(awk '$2 >= 4' "$T/probes" | wc -l)" -ge 2 ] || h_fail "fewer than 2 probes ran while the capped upstream was full: $(paste -sd';' "$T/probes")"
# the reload's old workers are gone, with their permits and tickets
WAIT_S=20 h_wait_for bash -c "! pgrep -P $MASTER | grep -qxF '$(head -n1 <<<"$old_workers")'" || h_fail "old workers still running"
rc_clean ngx
ngx -s quit 2>>"$T/nginx-signal.log" || h_fail "nginx -s quit failed"
h_wait_pid_gone "$MASTER" 20 || h_fail "nginx did not quit"
rc_clean ngx
echo ok
