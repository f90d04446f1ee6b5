# isolate_libs.sh -- a program linked against stand-in hiredis (0.14 and 1.1.0) and libconfig
# whose every function aborts runs capped under the shim: the shim uses only its own copies,
# exports nothing of them, and needs neither library at run time.
. "$(dirname "$0")/../lib/harness.sh"
SHIM="$BUILD/libconncap.so"

# The shim's dynamic interface: no hiredis/libconfig DT_NEEDED, nothing of them imported,
# nothing exported but the interposed symbols of shim/exports.map.
exports=$(sed -n '/global:/,/local:/p' "$ROOT/shim/exports.map" | tr -s ' ;\t' '\n' | grep -v ':' | grep . | sort)
[ "$(echo "$exports" | wc -l)" -ge 10 ] || h_fail "could not read the export list of shim/exports.map"
needed=$(readelf -d "$SHIM" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
h_note "shim needs: $(echo $needed)"
echo "$needed" | grep -Eq 'hiredis|libconfig' && h_fail "the shim needs a shared hiredis or libconfig: $needed"
imported=$(nm -D --undefined-only "$SHIM" | awk '{ print $NF }' | grep -E '^(redis|config_|freeReplyObject|sds|hi_)')
[ -z "$imported" ] || h_fail "the shim imports hiredis/libconfig symbols: $(echo $imported)"
extra=$(nm -D --defined-only "$SHIM" | awk '{ print $NF }' | sed 's/@.*//' | sort | comm -23 - <(echo "$exports"))
[ -z "$extra" ] || h_fail "the shim exports more than shim/exports.map: $(echo $extra)"

# Stand-ins under the real sonames, with the real libraries' function names and more.
mkdir -p "$T/lib"
standin() { # SONAME NAMES_FILE REAL_LIB_NAME
    local real names="$T/${1}.names"
    real=$(readlink -f "$(${CC:-cc} -print-file-name="$3")")
    { cat "$ROOT/tests/standin/$2"
      [ -f "$real" ] && nm -D --defined-only "$real" | awk '$2 == "T" && $3 !~ /^_/ { print "STANDIN(" $3 ")" }'
    } | sort -u > "$names"
    ${CC:-cc} -shared -fPIC -o "$T/lib/$1" -Wl,-soname,"$1" -DSTANDIN_NAMES="\"$names\"" \
        "$ROOT/tests/standin/standin.c" || h_fail "cannot build the stand-in $1"
    h_note "stand-in $1: $(wc -l < "$names") functions"
}
standin libhiredis.so.0.14 hiredis.names libhiredis.so
standin libhiredis.so.1.1.0 hiredis.names libhiredis.so
standin libconfig.so.9 libconfig.names libconfig.so
case "${SAN:-}" in
    asan) sanflags=-fsanitize=address ;; tsan) sanflags=-fsanitize=thread ;;
    ubsan) sanflags=-fsanitize=undefined ;; *) sanflags= ;;
esac
${CC:-cc} $sanflags -o "$T/linked" "$ROOT/tests/standin/linked.c" -Wl,--no-as-needed \
    "$T/lib/libhiredis.so.0.14" "$T/lib/libhiredis.so.1.1.0" "$T/lib/libconfig.so.9" -Wl,-rpath,"$T/lib" ||
    h_fail "cannot link the program against the stand-ins"
[ "$(readelf -d "$T/linked" | grep -cE 'NEEDED.*(libhiredis.so.0.14|libhiredis.so.1.1.0|libconfig.so.9)')" -eq 3 ] ||
    h_fail "the program does not need the three stand-ins"
# The stand-ins do kill a caller: the program's own call aborts.
"$T/linked" --call-standin 2>"$T/call.err"; rc=$?
[ $rc -eq 134 ] && grep -q 'stand-in .* called' "$T/call.err" || h_fail "calling a stand-in gave exit $rc, want an abort (134)"

h_redis_start
h_server_start 60000
h_conf "$T/c.conf" api 1 5000 2000 "127.0.0.1:$SRV_PORT"
mkfifo "$T/in"
LD_DEBUG=bindings LD_DEBUG_OUTPUT="$T/ld" LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" \
    "$T/linked" 127.0.0.1 "$SRV_PORT" <"$T/in" >"$T/linked.out" 2>"$T/linked.err" &
pid=$!
_pids+=("$pid")
exec 3>"$T/in"
connected() { grep -q '^connected' "$T/linked.out" || ! kill -0 "$pid" 2>/dev/null; }
WAIT_S=20 h_wait_for connected
grep -q '^connected' "$T/linked.out" || { exec 3>&-; wait "$pid"
    h_fail "the program did not connect (exit $?): $(cat "$T/linked.out" "$T/linked.err")"; }
held=$(h_holders api)
exec 3>&-
wait "$pid"; rc=$?
h_note "exit $rc, holders while connected $held, after $(h_holders api), server total $(h_server_stat total)"
[ $rc -eq 0 ] || h_fail "the program exited $rc under the shim: $(cat "$T/linked.out" "$T/linked.err")"
grep -q '^closed' "$T/linked.out" || h_fail "the program did not close its connection"
[ "$held" -eq 1 ] || h_fail "the connect was not capped: $held holders while connected, want 1"
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "the permit was not released: $(h_holders api) holders"
[ "$(h_server_stat total)" -eq 1 ] || h_fail "server saw $(h_server_stat total) connections, want 1"

# The dynamic linker's own account: the shim bound to libc, never to a stand-in; nothing bound
# to the shim but its interposed symbols.
bind=$(cat "$T"/ld.* 2>/dev/null | grep 'binding file')
echo "$bind" | grep -q "binding file $SHIM .* to .*libc.so" || h_fail "no binding of the shim to libc seen (LD_DEBUG)"
tos=$(echo "$bind" | grep "binding file $SHIM .* to $T/lib/")
[ -z "$tos" ] || h_fail "the shim bound to the stand-ins: $(echo "$tos" | head -n 5)"
to_shim=$(echo "$bind" | grep " to $SHIM " | sed -n "s/.*symbol \`\([^']*\)'.*/\1/p" | sort -u)
[ -n "$to_shim" ] || h_fail "no binding to the shim seen (LD_DEBUG)"
odd=$(comm -23 <(echo "$to_shim") <(echo "$exports"))
[ -z "$odd" ] || h_fail "symbols other than the interposed ones bound to the shim: $(echo $odd)"
echo ok
