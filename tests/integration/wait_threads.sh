# wait_threads.sh -- a thread blocked waiting on semaphore A never delays another thread's acquires and releases on B.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
PA=$SRV_PORT
h_server_start 0
PB=$SRV_PORT
cat >"$T/c.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "a"; limit = 1; lease_ms = 30000; wait_timeout_ms = 6000; },
               { name = "b"; limit = 5; lease_ms = 30000; wait_timeout_ms = 6000; } );
rules = ( { semaphore = "a"; match = ( "127.0.0.1:$PA" ); }, { semaphore = "b"; match = ( "127.0.0.1:$PB" ); } );
CONF
export CONNCAP_CONFIG="$T/c.conf"
mkfifo "$T/a.in"
LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$PA" -1 <"$T/a.in" >"$T/a.out" &
exec 7>"$T/a.in"
WAIT_S=5 h_wait_for h_holders_is a 1 || h_fail "the holder of A got no permit"
# one thread waits for A (up to 6 s); the main thread connects 30 times to B
out=$(LD_PRELOAD="$LIB" "$PROGS/twosem" 127.0.0.1 "$PA" "$PB" 30 7>&-) || h_fail "twosem failed: $out"
h_note "$out"
set -- $out
[ "$6" = 1 ] || h_fail "the waiter on A was done before B's connects finished: $out"
[ "$8" = ETIMEDOUT ] || h_fail "the waiter on A: want ETIMEDOUT, got $8"
# had the waiter's block held the shared connection, each connect to B would
# wait for its next re-check (up to 1 s)
python3 -c "import sys; sys.exit(0 if $2 < 200 else 1)" || h_fail "B's connects were delayed: median $2 ms"
[ "$(h_server_stat total)" -eq 30 ] || h_fail "B's server saw $(h_server_stat total) connections, want 30"
exec 7>&-
WAIT_S=5 h_wait_for h_holders_is a 0 || h_fail "holder of A left"
echo ok
