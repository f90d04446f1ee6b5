# harness.sh -- shared helpers for integration tests, the demo and the bench.
# Source it; it starts private servers in a temporary folder and stops them,
# by pid, on exit. Never touches a Redis it did not start.
set -u
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
LIB="$BUILD/libconncap.so"
CLI="$BUILD/conncap"
PROGS="$BUILD/progs"
T=$(mktemp -d "${TMPDIR:-/tmp}/conncap-test.XXXXXX")
_pids=()

h_cleanup() {
    local rc=$? p
    set +e
    for p in "${_pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${_pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
        kill -9 "$p" 2>/dev/null
    done
    rm -rf "$T"
    exit $rc
}
trap h_cleanup EXIT

h_fail() { echo "FAIL: $*" >&2; exit 1; }
h_note() { echo "  $*" >&2; }

# h_free_port: prints a free TCP port on 127.0.0.1.
h_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# h_wait_file FILE [SECONDS]: waits until FILE exists and is not empty.
h_wait_file() {
    local i
    for i in $(seq $(( ${2:-10} * 20 ))); do [ -s "$1" ] && return 0; sleep 0.05; done
    return 1
}

# h_redis_start [NAME]: starts a private redis-server (TCP port and Unix
# socket in $T); sets REDIS_PORT, REDIS_SOCK, REDIS_PID. Extra redis.conf
# lines may be given in $REDIS_EXTRA.
h_redis_start() {
    local n=${1:-redis}
    REDIS_PORT=$(h_free_port)
    REDIS_SOCK="$T/$n.sock"
    mkdir -p "$T/$n"
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --unixsocket "$REDIS_SOCK" \
        --unixsocketperm 700 --dir "$T/$n" --save '' --appendonly no --daemonize no \
        --logfile "$T/$n.log" ${REDIS_EXTRA:-} &
    REDIS_PID=$!
    _pids+=("$REDIS_PID")
    local i
    for i in $(seq 100); do
        redis-cli -s "$REDIS_SOCK" ping >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    h_fail "redis-server did not start (see $T/$n.log)"
}

# h_redis_stop: stops the private redis-server by pid.
h_redis_stop() {
    kill "$REDIS_PID" 2>/dev/null
    local i
    for i in $(seq 100); do kill -0 "$REDIS_PID" 2>/dev/null || return 0; sleep 0.05; done
    kill -9 "$REDIS_PID" 2>/dev/null
}

# h_rcli ARGS...: redis-cli against the private server.
h_rcli() { redis-cli -s "$REDIS_SOCK" "$@"; }

# h_server_start HOLD_MS [--v6]: starts countserver; sets SRV_PORT, SRV_STATS.
h_server_start() {
    local hold=$1; shift
    SRV_STATS="$T/srv.$RANDOM.json"
    local pf="$T/srv.$RANDOM.port"
    python3 "$ROOT/tests/lib/countserver.py" --hold "$hold" --stats "$SRV_STATS" --portfile "$pf" "$@" &
    _pids+=("$!")
    SRV_PID=$!
    h_wait_file "$pf" || h_fail "countserver did not start"
    SRV_PORT=$(cat "$pf")
}

# h_server_stat KEY: prints cur, max or total from the countserver.
h_server_stat() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$SRV_STATS" "$1"; }

# h_holders SEM: number of live holders of SEM in the private Redis.
h_holders() { h_rcli zcard "conncap:{$1}:holders"; }

# h_conf FILE SEM LIMIT LEASE_MS WAIT_MS MATCH... : writes a config using the
# private Redis's Unix socket; extra top-level lines in $CONF_EXTRA.
h_conf() {
    local f=$1 sem=$2 limit=$3 lease=$4 wait=$5; shift 5
    local m="" p
    for p in "$@"; do m="$m${m:+, }\"$p\""; done
    cat > "$f" <<CONF
redis = { socket = "$REDIS_SOCK"; connect_timeout_ms = 300; command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "$sem"; limit = $limit; lease_ms = $lease; wait_timeout_ms = $wait; } );
rules = ( { semaphore = "$sem"; match = ( $m ); } );
on_timeout = "${ON_TIMEOUT:-ETIMEDOUT}";
on_redis_down = "${ON_DOWN:-open}";
log_level = "${LOG_LEVEL:-warn}";
${CONF_EXTRA:-}
CONF
}

# h_wait_for CMD...: retries CMD for up to ${WAIT_S:-10} s; returns its status.
h_wait_for() {
    local i
    for i in $(seq $(( ${WAIT_S:-10} * 20 ))); do "$@" && return 0; sleep 0.05; done
    return 1
}

# h_holders_is SEM N: true when SEM has exactly N holders (for h_wait_for).
h_holders_is() { [ "$(h_holders "$1")" -eq "$2" ]; }
