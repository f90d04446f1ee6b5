# queue_apache.sh -- under the default configuration (non-blocking connects queue), limit 4, Apache prefork with mod_proxy (APR connects non-blocking and polls) answers all of ab -n 200 -c 20 with 200.
# A private instance: its own config file, port, pid file, runtime and log
# folders under $T; 24 prefork workers; the upstream holds each connection
# 200 ms. Run as root, its workers run as nobody: they read the conncap config
# (Redis over TCP) from a folder they may read. Asserts: ab and the access log
# show 200 answers of 200, no proxy error in Apache's log, the upstream's
# concurrency reaches 4 and never exceeds it, no holder, ticket or waiter is
# left in Redis after.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
M=/usr/lib/apache2/modules
APACHE=$(command -v apache2 || echo /usr/sbin/apache2)
[ -x "$APACHE" ] || { echo "skipped: apache2 is not installed (mk/deps.sh test)"; exit 77; }
[ -f "$M/mod_mpm_prefork.so" ] && [ -f "$M/mod_proxy_http.so" ] || { echo "skipped: apache2's prefork or proxy_http module is missing (apache2-bin)"; exit 77; }
command -v ab >/dev/null || { echo "skipped: ab (apache2-utils) is not installed"; exit 77; }
h_redis_start
h_server_start 200
RC_LABEL=apache
A="$T/apache"
mkdir -p "$A/logs" "$A/run"
chmod 711 "$T"; chmod 755 "$A"
# the workers (nobody, when run as root) read this file and reach Redis over TCP
cat > "$A/c.conf" <<CONF
redis = { host = "127.0.0.1"; port = $REDIS_PORT; connect_timeout_ms = 300; command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "web"; limit = 4; lease_ms = 10000; wait_timeout_ms = 30000; } );
rules = ( { semaphore = "web"; match = ( "127.0.0.1:$SRV_PORT" ); } );
log_level = "warn";
CONF
chmod 644 "$A/c.conf"
"$CLI" check --offline -c "$A/c.conf" >/dev/null || h_fail "the config does not pass conncap check"
AP=$(h_free_port)
cat > "$A/httpd.conf" <<ACONF
ServerRoot "$A"
ServerName 127.0.0.1
Listen 127.0.0.1:$AP
PidFile "$A/run/httpd.pid"
DefaultRuntimeDir "$A/run"
ErrorLog "$A/logs/error.log"
LogLevel warn
LogFormat "%h %l %u %t \"%r\" %>s %b" common
CustomLog "$A/logs/access.log" common
LoadModule mpm_prefork_module $M/mod_mpm_prefork.so
LoadModule authn_core_module $M/mod_authn_core.so
LoadModule authz_core_module $M/mod_authz_core.so
LoadModule proxy_module $M/mod_proxy.so
LoadModule proxy_http_module $M/mod_proxy_http.so
$( [ "$(id -u)" -eq 0 ] && printf 'User nobody\nGroup nogroup\n' )
StartServers 24
MinSpareServers 24
MaxSpareServers 32
ServerLimit 32
MaxRequestWorkers 32
KeepAlive Off
<Location "/">
    Require all granted
</Location>
ProxyPass "/" "http://127.0.0.1:$SRV_PORT/" retry=0 connectiontimeout=60 timeout=60 disablereuse=On
ACONF
"$APACHE" -t -f "$A/httpd.conf" >"$T/apache-t.log" 2>&1 || h_fail "apache2 -t: $(cat "$T/apache-t.log")"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$A/c.conf" setsid "$APACHE" -f "$A/httpd.conf" -DFOREGROUND 2>"$T/apache.err" &
APID=$!
_pids+=("$APID")
WAIT_S=20 h_wait_for bash -c "[ \$(pgrep -P $APID | wc -l) -ge 24 ]" || h_fail "apache did not start 24 workers: $(tail -n 5 "$A/logs/error.log")"
WAIT_S=10 h_wait_for bash -c "curl -s -o /dev/null http://127.0.0.1:$AP/nothing-here 2>/dev/null; [ -s '$A/logs/access.log' ]" ||
    h_fail "apache does not answer: $(tail -n 5 "$A/logs/error.log")"
: >"$A/logs/access.log"
before=$(h_server_stat total)

requests=200
timeout 90 ab -n $requests -c 20 "http://127.0.0.1:$AP/" >"$T/ab.out" 2>&1 || h_fail "ab failed or overran 90 s: $(tail -n 5 "$T/ab.out")"
complete=$(sed -n 's/^Complete requests: *//p' "$T/ab.out")
failed=$(sed -n 's/^Failed requests: *//p' "$T/ab.out")
non2xx=$(sed -n 's/^Non-2xx responses: *//p' "$T/ab.out")
ok=$(awk '$7 == "/" && $9 == 200' "$A/logs/access.log" | wc -l)
others=$(awk '$7 == "/" && $9 != 200 { print $9 }' "$A/logs/access.log" | sort | uniq -c | awk '{ printf "%s%sx%s", (NR > 1 ? "," : ""), $2, $1 }')
h_note "ab: $complete complete, $failed failed, ${non2xx:-0} non-2xx in $(sed -n 's/^Time taken for tests: *//p' "$T/ab.out"); access log: $ok answered 200, others: ${others:-none}; upstream max $(h_server_stat max), total $(( $(h_server_stat total) - before ))"
[ "$complete" = $requests ] || h_fail "ab completed $complete of $requests requests"
[ "$ok" -eq $requests ] || h_fail "$ok of $requests requests answered 200 (others: ${others:-none}): $(grep -m 2 -i 'proxy' "$A/logs/error.log")"
[ "$failed" = 0 ] && [ -z "$non2xx" ] || h_fail "ab: $failed failed, ${non2xx:-0} non-2xx"
grep -qi 'proxy.*error\|AH0095[0-9]\|AH00957' "$A/logs/error.log" && h_fail "apache logged proxy errors: $(grep -i 'proxy' "$A/logs/error.log" | head -n 3)"
rc_cap 4
[ $(( $(h_server_stat total) - before )) -eq $requests ] || h_fail "the upstream saw $(( $(h_server_stat total) - before )) connections for $requests requests"
rc_clean web
h_stop_pid "$APID"
rc_clean web
echo ok
