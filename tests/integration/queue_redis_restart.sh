# queue_redis_restart.sh -- Redis restarted empty under on_redis_down = "local" while Python asyncio has
# about 1,000 connects queued at limit 4 (an upstream that holds each 50 ms; Redis stopped 2 s in and
# started again 3 s later): once it answers, the queue drains at the limit's pace, every connect made.
# The waits queue their tickets again in the order the queue's runner polls them, and the waker's BLPOP
# names a semaphore's first-joined 256 waiters as the head of its queue: while the runner polled equal
# times in no particular order, grant tokens went to waiters left out of the BLPOP, their permits held
# unused until their tickets' refresh (20 s): 417 of 1,000 connected, 583 failed with ETIMEDOUT (7e151a7).
# A tester found it with 400 at limit 2.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
h_redis_start
h_server_start 50
ON_DOWN=local h_conf "$T/c.conf" rr 4 30000 60000 "127.0.0.1:$SRV_PORT"
(
    sleep 2
    h_redis_down
    sleep 3
    h_redis_spawn_again
) &
restarter=$!
rc_run restart 110 env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" python3 "$ROOT/tests/lib/clients/asyncio_opens.py" "$SRV_PORT" 1000
wait $restarter
rc_all 1000 100000
empty() { [ "$(h_rcli zcard 'conncap:{rr}:queue')" -eq 0 ] && [ "$(h_holders rr)" -eq 0 ]; }
WAIT_S=10 h_wait_for empty || h_fail "left in Redis: $(h_rcli zcard 'conncap:{rr}:queue') tickets, $(h_holders rr) holders"
echo ok
