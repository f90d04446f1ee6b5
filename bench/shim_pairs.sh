# shim_pairs.sh -- sourced by bench/run.sh (ROWS=shim): Redis time per acquire+release pair through the real shim.
# Issue 26. Every row is Redis's own accounting (CONFIG RESETSTAT, then INFO
# commandstats), on one private redis-server of its own with the function
# library loaded (`conncap setup`, as a fleet runs), in one pattern for all:
# NPROC processes at once, each N x (acquire, a TCP connect+close to a local
# listener, release), on a semaphore of limit NPROC (never contended):
#   shim:   `bench conn PORT N` under LD_PRELOAD (each process's warm-up
#           connect is one more pair);
#   direct: `pairs conn` (bench/pairs.c): the shim's own calls without the
#           shim, ccap_sem_acquire then ccap_sem_release_defer, as
#           runtime/waiting.c and runtime/release.c make them;
#   npm:    `node pairs.js conn` (bench/pairs.js): redis-semaphore's
#           Semaphore on ioredis, its acquire (EVALSHA) and release (ZREM);
#   rs:     `pairs rsconn` (bench/pairs.c): the same package's acquire script
#           (its text, from bench/node_modules) and ZREM, driven by the C loop
#           of `pairs conn`: node's event loop leaves Redis idle longer
#           between calls than the C programs do, which alone adds Redis
#           time per call (below), so this is the like-for-like comparison.
# The usec summed are those of the commands the clients sent (FCALL,
# EVALSHA, EVAL, ZREM: Redis counts a command run inside a script again
# under its own name, so those are left out of the sum and given apart);
# INFO and CONFIG are the harness's own, left out. Two shapes: 8 processes
# (as the pairs/s row) and one (a serial loop); SHIM_PAIRS_ROUNDS (5)
# interleaved rounds, the fastest of each row (the others only add other
# programs' preemption); redis-server runs SCHED_FIFO when it may (chrt), so
# that a call is less often preempted midway by the machine's other work.
# Why the pattern matters (bench/RESULTS.md, "The 4x of issue 26"): the usec
# Redis counts per call grow when it idles between calls, so the rows are
# only comparable when driven alike.

# shim_pairs_stats TOPLEVEL_REGEX: "usec calls inner" of the last run: the
# usec and calls of the commands matching TOPLEVEL_REGEX (the ones clients
# sent), and the calls of every other command but INFO and CONFIG (the
# scripts' own).
shim_pairs_stats() {
    redis-cli -s "$REDIS_SOCK" info commandstats | tr -d '\r' | awk -F'[:=,]' -v top="$1" '
        /^cmdstat_/ { n = substr($1, 9)
            if (n ~ "^(" top ")$") { u += $5; c += $3 }
            else if (n !~ /^(info|config)/) i += $3 }
        END { printf "%d %d %d\n", u, c, i }'
}

# shim_pairs_shim CONF NPROC N: NPROC processes at once, each `bench conn`
# of N pairs under the shim with CONF; fails if one did.
shim_pairs_shim() {
    local p=() i rc=0
    for i in $(seq "$2"); do
        CONNCAP_CONFIG="$1" LD_PRELOAD="$LIB" "$B/bench" conn "$SP_PORT" "$3" >/dev/null &
        p+=("$!")
    done
    for i in "${p[@]}"; do wait "$i" || rc=1; done
    return $rc
}

# shim_pairs_run KIND NPROC N: one run of KIND (shim, direct, npm); prints
# "us_per_pair calls_per_pair inner_per_pair pairs".
shim_pairs_run() {
    local kind=$1 np=$2 n=$3 pairs top u c i
    redis-cli -s "$REDIS_SOCK" config resetstat >/dev/null
    case $kind in
    shim)
        shim_pairs_shim "$T/sp.conf" "$np" "$n" || { echo "failed"; return; }
        pairs=$((np * (n + 1))) top='fcall|fcall_ro|evalsha|eval' ;;
    direct)
        pairs=$("$B/pairs" conn "$REDIS_SOCK" "$np" "$n" "$np" "$SP_PORT") || { echo "failed"; return; }
        top='fcall|fcall_ro|evalsha|eval' ;;
    rs)
        pairs=$("$B/pairs" rsconn "$REDIS_SOCK" "$np" "$n" "$np" "$SP_PORT" "$SP_SHA") || { echo "failed"; return; }
        top='evalsha|eval|zrem' ;;
    npm)
        pairs=$(node bench/pairs.js conn "$REDIS_SOCK" "$np" "$n" "$np" "$SP_PORT" 2>/dev/null) || { echo "failed"; return; }
        top='evalsha|eval|zrem' ;;
    esac
    read -r u c i < <(shim_pairs_stats "$top")
    awk -v u="$u" -v c="$c" -v i="$i" -v n="$pairs" 'BEGIN {printf "%.2f %.2f %.2f %d\n", u / n, c / n, i / n, n}'
}

shim_pairs_rows() {
    local main_sock=$REDIS_SOCK main_pid=$REDIS_PID rounds=${SHIM_PAIRS_ROUNDS:-5} shape np n r kind line
    if ! command -v node >/dev/null || ! [ -d bench/node_modules/redis-semaphore ]; then
        command -v npm >/dev/null && (cd bench && npm install --no-audit --no-fund --loglevel=error >/dev/null 2>&1)
    fi
    [ -d bench/node_modules/redis-semaphore ] || { row "shim pairs (issue 26)" "needs node and npm redis-semaphore" "" ""; return; }
    h_redis_start shimpairs
    chrt -f -a -p 1 "$REDIS_PID" 2>/dev/null || echo "shim_pairs: redis-server not SCHED_FIFO (figures include scheduling)" >&2
    local pf="$T/sp.port"
    "$B/bench" listen "$pf" >/dev/null 2>&1 &
    _pids+=("$!")
    h_wait_file "$pf" || { row "shim pairs" "listener did not start" "" ""; return; }
    SP_PORT=$(cat "$pf")
    SP_SHA=$(node -e 'const t = require("fs").readFileSync("bench/node_modules/redis-semaphore/lib/semaphore/acquire/lua.js", "utf8");
        process.stdout.write(t.match(/createEval\)\(`([^`]*)`/)[1])' | redis-cli -s "$REDIS_SOCK" -x script load)
    [ ${#SP_SHA} = 40 ] || { row "shim pairs" "redis-semaphore's acquire script not found" "" ""; return; }
    # SHIM_PAIRS_ONLY=usec or cg: only those rows
    for shape in "8 1500" "1 3000"; do
        [ "${SHIM_PAIRS_ONLY:-}" = cg ] && break
        set -- $shape
        np=$1 n=$2
        cat >"$T/sp.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; key_prefix = "bench:"; command_timeout_ms = 1000; };
semaphores = ( { name = "conn"; limit = $np; lease_ms = 30000; } );
rules = ( { semaphore = "conn"; match = ( "127.0.0.1:$SP_PORT" ); } );
CONF
        CONNCAP_CONFIG="$T/sp.conf" "$CLI" setup >/dev/null 2>&1 || { row "shim pairs" "conncap setup failed" "" ""; return; }
        local -A best=() calls=() inner=()
        for r in $(seq "$rounds"); do
            for kind in shim direct rs npm; do
                read -r line c i _ < <(shim_pairs_run "$kind" "$np" "$n")
                [ "$line" = failed ] && { row "shim pairs: $kind, $np processes" "run failed" "" ""; return; }
                if [ -z "${best[$kind]:-}" ] || awk -v a="$line" -v b="${best[$kind]}" 'BEGIN {exit !(a < b)}'; then
                    best[$kind]=$line calls[$kind]=$c inner[$kind]=$i
                fi
            done
        done
        local ratio agree rsr
        ratio=$(awk -v a="${best[shim]}" -v b="${best[npm]}" 'BEGIN {printf "%.2f", a / b}')
        rsr=$(awk -v a="${best[shim]}" -v b="${best[rs]}" 'BEGIN {printf "%.2f", a / b}')
        agree=$(awk -v a="${best[direct]}" -v b="${best[shim]}" 'BEGIN {d = (a - b) / b; printf "%+.0f%%", d * 100}')
        row "Redis us per pair through the shim, $np process(es) x $n" "${best[shim]} us (${ratio}x npm)" "2.0x" "$(verdict "$ratio" 2.0)"
        rows+=("$(printf '|   %-58s | %-24s | %-8s | %-8s |' "commands sent / run in scripts, per pair: shim" "${calls[shim]} / ${inner[shim]}" "" "")")
        row "  same pattern, direct calls (pairs conn) vs the shim row" "${best[direct]} us ($agree)" "20%" "$(verdict "$(awk -v a="${best[direct]}" -v b="${best[shim]}" 'BEGIN {d = (a - b) / b; print d < 0 ? -d : d}')" 0.20)"
        rows+=("$(printf '|   %-58s | %-24s | %-8s | %-8s |' "commands sent / run in scripts, per pair: direct" "${calls[direct]} / ${inner[direct]}" "" "")")
        row "  same pattern, npm redis-semaphore $(node -p 'require("./bench/node_modules/redis-semaphore/package.json").version' 2>/dev/null) (ioredis)" "${best[npm]} us" "" ""
        rows+=("$(printf '|   %-58s | %-24s | %-8s | %-8s |' "commands sent / run in scripts, per pair: npm" "${calls[npm]} / ${inner[npm]}" "" "")")
        row "  shim row vs redis-semaphore's ops in the C loop (rsconn)" "${rsr}x (${best[rs]} us)" "2.0x" "$(verdict "$rsr" 2.0)"
        unset best calls inner
    done
    [ "${SHIM_PAIRS_ONLY:-}" = usec ] || shim_pairs_cg_rows
    REDIS_SOCK=$main_sock REDIS_PID=$main_pid
}

# ---- the same loops, counted in instructions ----
# A redis-server of its own under callgrind, collecting only what serves a
# client (readQueryFromClient: parse, run, reply into the buffer; beforeSleep:
# the writes, the event loop's per-iteration work), not serverCron, whose
# share grows with the run's wall time. Each row is the difference of two
# runs, of SHIM_PAIRS_CG_LONG and SHIM_PAIRS_CG_SHORT pairs a process
# (500, 50), over their difference: what a process does once
# (connecting, the shim's set-up, the library's first key check) cancels,
# after a first short run of each kind whose count is dropped.
# Limit 8, one process and 8 at once (each run of 8 counts 8 times the
# pairs): the uncontended common path, the holders set never full; alone,
# a process finds the semaphore empty at each acquire (its release came
# first), 8 find up to 7 holders (and the sweep's read, the key's PTTL).
# Repeatable to a few hundred instructions whatever the machine's load.

# shim_pairs_cg_count KIND NPROC N: Redis's instructions for one run of KIND.
shim_pairs_cg_count() {
    local kind=$1 np=$2 n=$3 k
    callgrind_control -z "$SPCG_PID" >/dev/null 2>&1 || { echo -1; return; }
    case $kind in
    shim) shim_pairs_shim "$T/spcg.conf" "$np" "$n" ;;
    direct) "$B/pairs" conn "$SPCG_SOCK" "$np" "$n" 8 "$SP_PORT" >/dev/null ;;
    rs) "$B/pairs" rsconn "$SPCG_SOCK" "$np" "$n" 8 "$SP_PORT" "$SPCG_SHA" >/dev/null ;;
    esac || { echo -1; return; }
    callgrind_control -d "$SPCG_PID" >/dev/null 2>&1 || { echo -1; return; }
    # (each dump is the next cg.out.N: read the newest)
    k="$T/spcg/cg.out.$(ls "$T/spcg" | sed -n 's/^cg\.out\.\([0-9]*\)$/\1/p' | sort -n | tail -n 1)"
    awk '/^(summary|totals):/ {print $2; exit}' "$k" 2>/dev/null | grep . || echo -1
}

# shim_pairs_cg_rows: the instruction rows (needs valgrind's callgrind_control).
shim_pairs_cg_rows() {
    local short=${SHIM_PAIRS_CG_SHORT:-50} long=${SHIM_PAIRS_CG_LONG:-500} kind np a b i
    local -A per=()
    command -v callgrind_control >/dev/null || { row "Redis instructions per pair (callgrind)" "needs valgrind" "" ""; return; }
    SPCG_SOCK="$T/spcg.sock"
    mkdir -p "$T/spcg"
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=readQueryFromClient --toggle-collect=beforeSleep \
        --callgrind-out-file="$T/spcg/cg.out" redis-server --port 0 --unixsocket "$SPCG_SOCK" --unixsocketperm 700 \
        --dir "$T/spcg" --save '' --appendonly no --daemonize no --logfile "$T/spcg.log" >"$T/spcg.err" 2>&1 &
    SPCG_PID=$!
    _pids+=("$SPCG_PID")
    for i in $(seq 300); do redis-cli -s "$SPCG_SOCK" ping >/dev/null 2>&1 && break; sleep 0.1; done
    cat >"$T/spcg.conf" <<CONF
redis = { socket = "$SPCG_SOCK"; key_prefix = "bench:"; command_timeout_ms = 5000; };
semaphores = ( { name = "conn"; limit = 8; lease_ms = 30000; } );
rules = ( { semaphore = "conn"; match = ( "127.0.0.1:$SP_PORT" ); } );
CONF
    CONNCAP_CONFIG="$T/spcg.conf" "$CLI" setup >/dev/null 2>&1 || { row "Redis instructions per pair" "conncap setup failed" "" ""; return; }
    SPCG_SHA=$(node -e 'const t = require("fs").readFileSync("bench/node_modules/redis-semaphore/lib/semaphore/acquire/lua.js", "utf8");
        process.stdout.write(t.match(/createEval\)\(`([^`]*)`/)[1])' | redis-cli -s "$SPCG_SOCK" -x script load)
    for np in 1 8; do
        for kind in shim direct rs; do
            # (a first run of each kind, not counted: what only its first program finds to do)
            a=$(shim_pairs_cg_count "$kind" "$np" "$short")
            a=$(shim_pairs_cg_count "$kind" "$np" "$short") b=$(shim_pairs_cg_count "$kind" "$np" "$long")
            [ "$a" -gt 0 ] && [ "$b" -gt 0 ] || { row "Redis instructions per pair: $kind" "callgrind run failed" "" ""; return; }
            [ -n "${SPCG_DEBUG:-}" ] && echo "cg $kind x$np $short: $a, $long: $b" >&2
            per[$kind]=$(awk -v a="$a" -v b="$b" -v n=$((np * (long - short))) 'BEGIN {printf "%.0f", (b - a) / n}')
        done
        shim_pairs_cg_row "$np"
    done
    kill "$SPCG_PID" 2>/dev/null
}

# shim_pairs_cg_row NPROC: the rows of per[] (shim, direct, rs).
shim_pairs_cg_row() {
    local r agree
    r=$(awk -v a="${per[shim]}" -v b="${per[rs]}" 'BEGIN {printf "%.2f", a / b}')
    row "Redis instructions per pair through the shim, $1 process(es)" "$(awk -v v="${per[shim]}" 'BEGIN {printf "%.1fk", v / 1000}') (${r}x rsconn)" "2.0x" "$(verdict "$r" 2.0)"
    agree=$(awk -v a="${per[direct]}" -v b="${per[shim]}" 'BEGIN {d = (a - b) / b; printf "%+.1f%%", d * 100}')
    row "  direct calls (pairs conn) vs the shim row" "$(awk -v v="${per[direct]}" 'BEGIN {printf "%.1fk", v / 1000}') ($agree)" "20%" \
        "$(verdict "$(awk -v a="${per[direct]}" -v b="${per[shim]}" 'BEGIN {d = (a - b) / b; print d < 0 ? -d : d}')" 0.20)"
    row "  redis-semaphore's ops in the C loop (rsconn)" "$(awk -v v="${per[rs]}" 'BEGIN {printf "%.1fk", v / 1000}')" "" ""
}
