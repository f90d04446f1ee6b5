# queue_keeper.sh -- queued connects whose program socket waits in the keeper's descriptor table
# (runtime/keep.h), not on a descriptor of the process: 35 connects queued behind a held permit of a second
# semaphore ("crowd", they wait all along) take the queue's 32 own threads, so every connect the hostile
# modes of tests/progs/qbreak then queue waits in the runner with its socket in the keeper. Each mode must
# behave as it does for a connect with a thread of its own (tests/integration/queue_*.sh): options and the
# bound address set before and while queued answered and kept across a timeout or a shutdown and the
# retry, a fork child's copy reset while the parent's connect goes on, signal-driven sockets, the program
# closing numbers it did not open (the keeper's channel among them), epoll sets, a blocking connect() on
# it, a vfork child, the process exiting with 300 queued. And the last crowd connect takes no descriptor
# beyond its own socket (code before the keeper: one more). Nothing is left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
QB_WAIT_MS=3000
qb_setup
"$PROGS/qready" echo "$T/crowd.port" 2>"$T/crowd.err" &
_pids+=("$!")
h_wait_file "$T/crowd.port" || h_fail "the crowd's upstream did not start"
export QB_CROWD
QB_CROWD=$(cat "$T/crowd.port")
cat >"$T/q.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; connect_timeout_ms = 300; command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "qb"; limit = 1; lease_ms = 30000; wait_timeout_ms = $QB_WAIT_MS; },
               { name = "crowd"; limit = 1; lease_ms = 30000; wait_timeout_ms = 60000; } );
rules = ( { semaphore = "qb"; match = ( "127.0.0.1:$QB_UP" ); },
          { semaphore = "crowd"; match = ( "127.0.0.1:$QB_CROWD" ); } );
on_timeout = "ETIMEDOUT";
on_redis_down = "open";
log_level = "warn";
CONF

for m in retry-timeout retry-shutdown fork sigio poll-cancel hidden hidden-walk "epolls 3" stale-epoll blocking-connect vfork \
    "close-exit 300"; do
    mode=${m%% *}
    arg=${m#"$mode"}
    [ "$mode" = retry-timeout ] && arg=$QB_WAIT_MS
    qb_run "$mode" $arg || continue
    extra=$(qb_fact "$mode" crowd-extra-fds)
    h_note "$mode: ok; the crowd's last connect took ${extra:-?} descriptors beyond its socket"
    [ "${extra:-x}" = 0 ] || qb_bad "$mode: the 35th connect queued took ${extra:-?} descriptors beyond its own socket (want 0: kept in the keeper)"
    qb_clean "$mode"
done
h_note "retry after a timeout, from the keeper: $(qb_fact retry-timeout queued-options); $(qb_fact retry-timeout retry-options)"
crowd_clean() { local k; for k in holders queue qexp; do [ "$(h_rcli zcard "conncap:{crowd}:$k")" -eq 0 ] || return 1; done; }
WAIT_S=10 h_wait_for crowd_clean || qb_bad "the crowd's semaphore kept entries after its process exited"
qb_done
