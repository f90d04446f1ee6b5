# unmatched_no_redis.sh -- an unmatched destination causes no Redis command at all.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
h_redis_start
h_server_start 10
h_conf "$T/c.conf" api 2 5000 1000 "10.99.0.0/16:443"
h_rcli config resetstat >/dev/null
before=$(h_rcli info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p')
for i in 1 2 3; do
    "$CLI" run -c "$T/c.conf" -- curl -sS -o /dev/null "http://127.0.0.1:$SRV_PORT/" || h_fail "curl failed"
done
after=$(h_rcli info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p')
stats=$(h_rcli info commandstats | tr -d '\r')
h_note "commands processed before $before after $after"
# the only commands in between are our own INFO calls
[ $((after - before)) -le 1 ] || h_fail "unmatched connects sent commands to redis: $stats"
echo "$stats" | grep -qi evalsha && h_fail "evalsha seen: $stats"
[ "$(h_server_stat total)" -eq 3 ] || h_fail "server saw $(h_server_stat total) connections, want 3"
echo ok
