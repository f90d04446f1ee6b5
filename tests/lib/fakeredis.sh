# fakeredis.sh -- helpers for tests against tests/lib/fakeredis.py (hostile Redis) and tests/lib/measure.py.
# Source after harness.sh.

# fr_start ARGS...: starts fakeredis.py with ARGS (--mode ...); sets FR_PORT, FR_STATS.
fr_start() {
    FR_STATS="$T/fr.$RANDOM.json"
    local pf="$T/fr.$RANDOM.port"
    python3 "$ROOT/tests/lib/fakeredis.py" --portfile "$pf" --stats "$FR_STATS" "$@" &
    _pids+=("$!")
    h_wait_file "$pf" || h_fail "fakeredis did not start"
    FR_PORT=$(cat "$pf")
}

# fr_stat conns|cmds: what the fake server saw so far.
fr_stat() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$FR_STATS" "$1"; }

# fr_conf FILE SEM WAIT_MS MATCH [EXTRA]: a config whose Redis is the fake
# server, timeouts 200 ms; $FR_REDIS goes into the redis block (e.g. to
# make it a sentinel or a cluster seed).
fr_conf() {
    cat > "$1" <<CONF
redis = { host = "127.0.0.1"; port = $FR_PORT; connect_timeout_ms = 200; command_timeout_ms = 200; ${FR_REDIS:-} };
semaphores = ( { name = "$2"; limit = 2; lease_ms = 3000; wait_timeout_ms = $3; } );
rules = ( { semaphore = "$2"; match = ( "$4" ); } );
on_redis_down = "${ON_DOWN:-closed}";
on_timeout = "ETIMEDOUT";
log_level = "warn";
${5:-}
CONF
}

# fr_measure NAME TIMEOUT_S CMD...: runs CMD under measure.py (killed past
# TIMEOUT_S or 512 MB); stdout to $T/NAME.out, stderr to $T/NAME.err; sets
# M_RC, M_MS, M_KB (peak resident kB) and M_KILLED.
fr_measure() {
    local name=$1 to=$2; shift 2
    python3 "$ROOT/tests/lib/measure.py" --report "$T/$name.m" --timeout "$to" -- "$@" >"$T/$name.out" 2>"$T/$name.err"
    local line; line=$(cat "$T/$name.m")
    M_RC=$(echo "$line" | sed 's/.*rc=\([0-9]*\).*/\1/')
    M_MS=$(echo "$line" | sed 's/.*ms=\([0-9]*\).*/\1/')
    M_KB=$(echo "$line" | sed 's/.*hwm_kb=\([0-9]*\).*/\1/')
    M_KILLED=$(echo "$line" | sed 's/.*killed=\([a-z]*\).*/\1/')
}
