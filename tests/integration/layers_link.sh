# layers_link.sh -- the layers link one way (doc/ARCHITECTURE.md): the conncap CLI carries none of
# the shim's per-process runtime (no permit table, no runtime, no fork handler), core's objects
# call nothing of runtime/ or shim/, and the runtime's objects nothing of shim/ but through its hooks.
. "$(dirname "$0")/../lib/harness.sh"
CLI="$BUILD/conncap"
RT='ccap_(rt|ptab|breaker|live|handoff|permit)_'
[ -x "$CLI" ] || h_fail "no $CLI: run make first"

# Every symbol the CLI defines or uses, local ones included (the build does not strip).
syms=$(nm "$CLI" | awk '{ print $NF }')
[ "$(echo "$syms" | grep -c '^ccap_')" -ge 50 ] || h_fail "nm shows too few ccap_ symbols in $CLI: stripped?"
rt=$(echo "$syms" | grep -E "^$RT" | sort -u)
[ -z "$rt" ] || h_fail "the CLI links the shim's runtime: $(echo $rt)"
atfork=$(echo "$syms" | grep -E '(^|_)(pthread_atfork|__register_atfork)(@|$)' | sort -u)
[ -z "$atfork" ] || h_fail "the CLI registers fork handlers: $(echo $atfork)"
h_note "conncap: $(echo "$syms" | grep -c '^ccap_') ccap_ symbols, none of the runtime, no pthread_atfork"

# The objects of today's sources only: a build directory may keep objects of
# files since moved or deleted.
objs() { for c in "$ROOT/$1"/*.c; do b=$(basename "$c" .c); echo "$BUILD/$1/$b.o"; done; }

# Core's objects use nothing of the runtime or the shim (cli -> core, shim -> runtime -> core).
for o in $(objs core); do
    up=$(nm --undefined-only "$o" | awk '{ print $NF }' | grep -E "^$RT|^ccap_(shim|guard|real|heartbeat|watch)" | sort -u)
    [ -z "$up" ] || h_fail "$(basename "$o") (core) uses the runtime or the shim: $(echo $up)"
done
for o in $(objs runtime); do
    up=$(nm --undefined-only "$o" | awk '{ print $NF }' | grep -E '^ccap_(shim|guard|real|heartbeat|watch)' | sort -u)
    [ -z "$up" ] || h_fail "$(basename "$o") (runtime) uses the shim: $(echo $up)"
done
# The one fork registration of the shim is the runtime's.
n=$(for o in $(objs core) $(objs runtime) $(objs shim); do
        nm --undefined-only "$o" | grep -qw pthread_atfork && basename "$o"; done)
h_note "objects that register fork handlers: $(echo $n)"
echo "$n" | grep -qx lifecycle.o || h_fail "runtime/lifecycle.o does not register the fork handlers"
echo "$n" | grep -v -x -e lifecycle.o | grep -q . && h_fail "fork handlers registered outside runtime/lifecycle.c: $(echo $n)"
echo "ok"
