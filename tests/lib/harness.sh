# harness.sh -- shared helpers for integration tests, the demo and the bench.
# Source it; it starts private servers in a temporary folder and stops them,
# by pid, on exit. Never touches a Redis it did not start.
set -u
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
LIB="$BUILD/libconncap.so"
# A sanitizer runtime must come first in the process: preload it before the
# shim (our own test programs are built with the same sanitizer).
case "${SAN:-}" in
    asan) LIB="$(${CC:-cc} -print-file-name=libasan.so):$LIB" ;;
    tsan) LIB="$(${CC:-cc} -print-file-name=libtsan.so):$LIB" ;;
esac
# TSan models descriptors as memory: the shim's identity checks (fstat of a
# program's fd that another thread may close) are reads it reports on
# purpose; tests/lib/tsan-fd.supp names exactly those. Every test gets it.
if [ "${SAN:-}" = tsan ]; then
    case " ${TSAN_OPTIONS:-} " in *tsan-fd.supp*) ;; *)
        export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS }suppressions=$ROOT/tests/lib/tsan-fd.supp die_after_fork=0" ;;
    esac
fi
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
    # a failure leaves its clues in the log: the last lines of what the
    # test's programs and servers wrote (the folder itself goes)
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        for f in "$T"/*.err "$T"/*.log; do
            [ -s "$f" ] || continue
            echo "--- ${f##*/}, last lines:"
            tail -n 5 "$f"
        done 2>/dev/null | head -n 150 >&2
    fi
    rm -rf "$T"
    exit $rc
}
trap h_cleanup EXIT

# h_plain_only: this test runs third-party programs (curl, python3, nc)
# under the shim; a sanitizer-built shim cannot be preloaded into them (the
# sanitizer runtime must come first in the process), so under SAN=... the
# test reports itself skipped (exit 77) and says why.
h_plain_only() {
    if [ -n "${SAN:-}" ]; then
        echo "skipped under SAN=$SAN: third-party programs cannot host a sanitizer-built shim"
        exit 77
    fi
}

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

# ---- Redis failures, Sentinel, Cluster (tests/integration/redis_*.sh) ----

# h_free_ports N: prints N distinct free TCP ports on 127.0.0.1, one a line
# (one interpreter start for all of them).
h_free_ports() {
    python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# h_wait_pid_gone PID [SECONDS]: waits until PID has exited.
h_wait_pid_gone() {
    local i
    for i in $(seq $(( ${2:-10} * 20 ))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
    return 1
}

# h_stop_pid PID [SIGNAL]: sends SIGNAL (default TERM) to PID and waits
# until it has exited (a zombie counts as exited, and is reaped when it is
# this shell's child); SIGKILL after 5 s.
h_stop_pid() {
    local pid=$1 i st
    kill "-${2:-TERM}" "$pid" 2>/dev/null
    for i in $(seq 100); do
        st=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)
        if [ -z "$st" ] || [ "$st" = Z ]; then wait "$pid" 2>/dev/null; return 0; fi
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}

# h_redis_down: stops the private redis-server by pid (as h_redis_stop, but
# returns as soon as it has exited).
h_redis_down() { h_stop_pid "$REDIS_PID"; }

# h_redis_restart [NAME]: stops the private redis-server (SIGTERM, by pid)
# and starts it again on the same port, socket and folder, with the same
# $REDIS_EXTRA. Without persistence in $REDIS_EXTRA it comes back empty.
# $RESTART_GAP_S seconds pass between stop and start (default 0).
h_redis_restart() {
    local n=${1:-redis}
    h_redis_down
    sleep "${RESTART_GAP_S:-0}"
    h_redis_spawn_again "$n"
}

# h_redis_spawn_again [NAME]: starts the private redis-server again after
# h_redis_down (same port, socket, folder); waits for PING.
h_redis_spawn_again() {
    local n=${1:-redis} i
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --unixsocket "$REDIS_SOCK" \
        --unixsocketperm 700 --dir "$T/$n" --save '' --appendonly no --daemonize no \
        --logfile "$T/$n.log" ${REDIS_EXTRA:-} &
    REDIS_PID=$!
    _pids+=("$REDIS_PID")
    for i in $(seq 100); do
        redis-cli -s "$REDIS_SOCK" ping 2>/dev/null | grep -q PONG && return 0
        sleep 0.05
    done
    h_fail "redis-server did not start again (see $T/$n.log)"
}

# h_sentinel_start: a master and one replica (redis-server) and three
# sentinels (redis-sentinel) watching them as "mymaster", with short
# timeouts (down-after 1000 ms, failover-timeout 2000 ms). Sets
# SENT_MASTER_PORT, SENT_REPLICA_PORT, SENT_MASTER_PID, SENT_REPLICA_PID,
# SENT_PORTS (array), SENT_NAME. Returns once the replica is in sync and
# every sentinel answers; h_sentinel_settled waits for the rest.
h_sentinel_start() {
    local ports p i k
    SENT_NAME=mymaster
    mapfile -t ports < <(h_free_ports 5)
    SENT_MASTER_PORT=${ports[0]}
    SENT_REPLICA_PORT=${ports[1]}
    SENT_PORTS=("${ports[2]}" "${ports[3]}" "${ports[4]}")
    mkdir -p "$T/smaster" "$T/sreplica"
    redis-server --port "$SENT_MASTER_PORT" --bind 127.0.0.1 --dir "$T/smaster" --save '' \
        --appendonly no --daemonize no --logfile "$T/smaster.log" ${SENT_EXTRA:-} &
    SENT_MASTER_PID=$!
    _pids+=("$SENT_MASTER_PID")
    redis-server --port "$SENT_REPLICA_PORT" --bind 127.0.0.1 --dir "$T/sreplica" --save '' \
        --appendonly no --daemonize no --logfile "$T/sreplica.log" \
        --replicaof 127.0.0.1 "$SENT_MASTER_PORT" ${SENT_EXTRA:-} &
    SENT_REPLICA_PID=$!
    _pids+=("$SENT_REPLICA_PID")
    for k in 0 1 2; do
        p=${SENT_PORTS[$k]}
        mkdir -p "$T/sentinel$k"
        cat > "$T/sentinel$k/sentinel.conf" <<SCONF
port $p
bind 127.0.0.1
daemonize no
dir $T/sentinel$k
logfile $T/sentinel$k.log
sentinel monitor $SENT_NAME 127.0.0.1 $SENT_MASTER_PORT 2
sentinel down-after-milliseconds $SENT_NAME 1000
sentinel failover-timeout $SENT_NAME 2000
sentinel parallel-syncs $SENT_NAME 1
SCONF
        redis-sentinel "$T/sentinel$k/sentinel.conf" &
        _pids+=("$!")
    done
    for i in $(seq 400); do
        local ready=1
        [ "$(redis-cli -p "$SENT_REPLICA_PORT" info replication 2>/dev/null | tr -d '\r' |
             sed -n 's/^master_link_status://p')" = up ] || ready=0
        for p in "${SENT_PORTS[@]}"; do
            [ $ready = 1 ] || break
            redis-cli -p "$p" sentinel get-master-addr-by-name "$SENT_NAME" 2>/dev/null | grep -q . || ready=0
        done
        [ $ready = 1 ] && return 0
        sleep 0.05
    done
    h_fail "the replica or the sentinels did not start within 20 s (see $T/*.log)"
}

# h_sentinel_settled: waits until every sentinel knows the replica and the
# two other sentinels (they find each other through hello messages every
# 2 s), so that a failover can get its quorum.
h_sentinel_settled() {
    local i p
    for i in $(seq 400); do
        local ready=1
        for p in "${SENT_PORTS[@]}"; do
            [ "$(redis-cli -p "$p" sentinel replicas "$SENT_NAME" 2>/dev/null | grep -c '^name$')" -ge 1 ] || ready=0
            [ "$(redis-cli -p "$p" sentinel sentinels "$SENT_NAME" 2>/dev/null | grep -c '^name$')" -ge 2 ] || ready=0
            [ $ready = 1 ] || break
        done
        [ $ready = 1 ] && return 0
        sleep 0.05
    done
    h_fail "sentinels did not settle within 20 s (see $T/sentinel*.log)"
}

# h_sentinel_master: prints the master's "host:port" as the first sentinel
# that answers reports it.
h_sentinel_master() {
    local p out
    for p in "${SENT_PORTS[@]}"; do
        out=$(redis-cli -p "$p" sentinel get-master-addr-by-name "$SENT_NAME" 2>/dev/null | paste -sd: -)
        [ -n "$out" ] && { echo "$out"; return 0; }
    done
    return 1
}

# h_cluster_start: three redis-server masters with cluster-enabled, joined
# with redis-cli --cluster create (slots split in three, no replicas).
# Sets CLUSTER_PORTS and CLUSTER_PIDS (arrays). Returns once every node
# reports cluster_state:ok.
h_cluster_start() {
    local ports p k i
    mapfile -t ports < <(h_free_ports 6)  # clients' ports, then the cluster bus ports
    CLUSTER_PORTS=("${ports[@]:0:3}")
    CLUSTER_PIDS=()
    for k in 0 1 2; do
        p=${CLUSTER_PORTS[$k]}
        mkdir -p "$T/cnode$k"
        (cd "$T/cnode$k" && exec redis-server --port "$p" --cluster-port "${ports[$((k + 3))]}" \
            --bind 127.0.0.1 --cluster-enabled yes \
            --cluster-config-file "$T/cnode$k/nodes.conf" --cluster-node-timeout 2000 --dir "$T/cnode$k" \
            --save '' --appendonly no --daemonize no --logfile "$T/cnode$k.log" ${CLUSTER_EXTRA:-}) &
        CLUSTER_PIDS+=("$!")
        _pids+=("$!")
    done
    for p in "${CLUSTER_PORTS[@]}"; do
        h_wait_for redis-cli -p "$p" ping >/dev/null || h_fail "cluster node $p did not start"
    done
    redis-cli ${CLUSTER_AUTH:-} --cluster create "127.0.0.1:${CLUSTER_PORTS[0]}" "127.0.0.1:${CLUSTER_PORTS[1]}" \
        "127.0.0.1:${CLUSTER_PORTS[2]}" --cluster-yes >"$T/cluster-create.log" 2>&1 ||
        h_fail "redis-cli --cluster create failed (see $T/cluster-create.log)"
    for i in $(seq 400); do
        local ok=1
        for p in "${CLUSTER_PORTS[@]}"; do
            redis-cli ${CLUSTER_AUTH:-} -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
        done
        [ $ok = 1 ] && return 0
        sleep 0.05
    done
    h_fail "the cluster did not reach cluster_state:ok within 20 s"
}

# h_cluster_owner KEY: prints the port of the cluster master that serves KEY
# (from CLUSTER NODES: "id host:port@bus flags master ... slot ranges").
h_cluster_owner() {
    local slot
    slot=$(redis-cli ${CLUSTER_AUTH:-} -p "${CLUSTER_PORTS[0]}" cluster keyslot "$1")
    redis-cli ${CLUSTER_AUTH:-} -p "${CLUSTER_PORTS[0]}" cluster nodes | awk -v s="$slot" '
        $3 ~ /master/ {
            for (i = 9; i <= NF; i++) {
                if ($i ~ /^\[/) continue
                n = split($i, r, "-"); lo = r[1] + 0; hi = (n > 1 ? r[2] : r[1]) + 0
                if (s >= lo && s <= hi) { split($2, a, "[:@]"); print a[2]; exit }
            }
        }'
}

# h_ccli PORT ARGS...: redis-cli against one cluster node, following redirects.
h_ccli() { local p=$1; shift; redis-cli ${CLUSTER_AUTH:-} -c -p "$p" "$@"; }

# h_tls_certs: a CA, a server certificate for localhost and 127.0.0.1, a
# client certificate (both signed by that CA) and a second, unrelated CA,
# made with openssl in $T/tls: ca.pem, server.{pem,key}, client.{pem,key},
# other-ca.pem.
h_tls_certs() {
    local d="$T/tls"
    mkdir -p "$d"
    (
        cd "$d" || exit 1
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=conncap test CA" -keyout ca.key -out ca.pem
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=other CA" -keyout other-ca.key -out other-ca.pem
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > san.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.pem
        openssl req -newkey rsa:2048 -nodes -subj "/CN=conncap client" -keyout client.key -out client.csr
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out client.pem
    ) >"$T/tls.log" 2>&1 || h_fail "openssl could not make the test certificates (see $T/tls.log)"
    TLS_DIR=$d
}

# h_redis_tls_start [NAME] [AUTH_CLIENTS]: h_redis_start with a TLS port too
# ($REDIS_TLS_PORT; server certificate from h_tls_certs; client certificates
# "no" (default), "yes" or "optional"). $REDIS_TLS_EXTRA keeps the TLS
# arguments: set REDIS_EXTRA to it before h_redis_restart.
h_redis_tls_start() {
    REDIS_TLS_PORT=$(h_free_port)
    local d=$TLS_DIR
    REDIS_TLS_EXTRA="--tls-port $REDIS_TLS_PORT --tls-cert-file $d/server.pem --tls-key-file $d/server.key \
--tls-ca-cert-file $d/ca.pem --tls-auth-clients ${2:-no}"
    REDIS_EXTRA="$REDIS_TLS_EXTRA ${REDIS_EXTRA:-}" h_redis_start "${1:-redis}"
}

# h_redis_sent REDIS-CLI-ARGS...: the commands clients have sent the server so
# far, from INFO commandstats: top-level ones only (commandstats also counts
# the calls scripts make; a client sends LPUSH and PEXPIRE only as a waker's
# poke, so each LPUSH counts twice -- the scripts' own wake tokens too: an
# upper bound -- and CLIENT LIST and INFO are the tests' own).
h_redis_sent() {
    redis-cli "$@" info commandstats | tr -d '\r' | awk -F: '
        /^cmdstat_/ { name = substr($1, 9); n = $2; sub(/^calls=/, "", n); sub(/,.*/, "", n) }
        name ~ /^(evalsha|evalsha_ro|eval|eval_ro|fcall|fcall_ro|blpop|hello|auth|select|ping)$/ { s += n }
        name ~ /^(script|function|client)[|]/ && name != "client|list" { s += n }
        name == "lpush" { s += 2 * n }
        END { print s + 0 }'
}

# h_connloop_monitored PROCS ROUNDS: a fleet of connect loops on a full
# semaphore (limit 2, a 5 ms server hold) under MONITOR; fails the test unless
# every connect succeeds and the server never sees more than 2 at once.
# Leaves the commands Redis saw in $T/monitor (the monitor stopped).
h_connloop_monitored() {
    local procs=$1 rounds=$2 mon
    h_redis_start
    h_server_start 5
    h_conf "$T/c.conf" api 2 30000 60000 "127.0.0.1:$SRV_PORT"
    redis-cli -s "$REDIS_SOCK" monitor >"$T/monitor" &
    mon=$!
    _pids+=("$mon")
    sleep 0.3
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/connloop" 127.0.0.1 "$SRV_PORT" "$procs" "$rounds" -1 >"$T/out" \
        || h_fail "some connects failed: $(grep -v '^ok' "$T/out" | head -3)"
    [ "$(grep -c '^ok' "$T/out")" -eq $((procs * rounds)) ] \
        || h_fail "want $((procs * rounds)) connects, got $(grep -c '^ok' "$T/out")"
    [ "$(h_server_stat max)" -le 2 ] || h_fail "cap exceeded: $(h_server_stat max)"
    sleep 0.3
    kill "$mon" 2>/dev/null
}

# h_build_bench: bench/bench.c built as $T/bench, with the sanitizer of the
# run (SAN) when there is one; fails the test when it does not build.
h_build_bench() {
    local san=""
    case "${SAN:-}" in
        asan) san="-fsanitize=address -fno-omit-frame-pointer" ;;
        tsan) san="-fsanitize=thread" ;;
    esac
    # shellcheck disable=SC2046,SC2086
    cc -O1 -g -std=gnu11 -D_GNU_SOURCE -pthread $san $(pkg-config --cflags hiredis) -o "$T/bench" \
        "$ROOT/bench/bench.c" $(pkg-config --libs hiredis) || h_fail "bench/bench.c did not build"
}
