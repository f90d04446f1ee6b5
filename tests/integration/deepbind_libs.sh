# deepbind_libs.sh -- a library loaded with RTLD_DEEPBIND (bound at load, or lazily) and the dependency loaded
# with it are capped: their connects take permits, their close gives them back, a non-blocking connect is
# queued and their poll/getsockopt see it connect; a library's own connect() stays its own; a failed load
# keeps the loader's dlerror(). The shim's dlopen changes nothing else: a library still loads by a bare name
# or $ORIGIN from its own RUNPATH, with RTLD_DEEPBIND (resolved as from the library) and without (a tail call).
# The libraries are tests/deeplib/deeplib.c; the driver tests/progs/deepbind.c.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
L="$T/lib"
mkdir -p "$L/sub"
lib() { # OUT DEFINE LDFLAGS...
    local out=$1 def=$2; shift 2
    ${CC:-cc} -shared -fPIC -O1 -D"$def" -o "$out" "$ROOT/tests/deeplib/deeplib.c" "$@" 2>>"$T/cc.err" ||
        h_fail "cannot build $(basename "$out"): $(cat "$T/cc.err")"
}
lib "$L/sub/libdeepdep.so" DEP -Wl,-soname,libdeepdep.so -Wl,-z,lazy
lib "$L/sub/libdeepsub.so" SUB -Wl,-soname,libdeepsub.so -Wl,-z,now
for v in now lazy plain; do
    lib "$L/libdeep$v.so" TOP -Wl,-soname,"libdeep$v.so" -L"$L/sub" -ldeepdep -Wl,-rpath,'$ORIGIN/sub' \
        -Wl,--enable-new-dtags -Wl,-z,"$( [ $v = lazy ] && echo lazy || echo now )"
done
lib "$L/libdeepown.so" OWN -Wl,-z,now
h_note "libdeeplazy.so: $(readelf -d "$L/libdeeplazy.so" | grep -cE 'BIND_NOW|FLAGS_1.*NOW') BIND_NOW flags (0: lazy)"
readelf -d "$L/libdeeplazy.so" | grep -qE 'BIND_NOW|Flags:.*NOW' && h_fail "libdeeplazy.so was linked with BIND_NOW"

dp() { lc_drive "$1" "$PROGS/deepbind" "$1" "$L" "$SRV_PORT"; }
# a sanitizer's own dlopen aborts on RTLD_DEEPBIND, and its interceptor is the caller the loader
# sees: the program then calls the shim's dlopen itself, and the modes that need the library's own
# dlopen to reach the loader as the library's are left out
[ -n "${SAN:-}" ] && export DEEP_DIRECT=1

lc_setup 30000 10
dp now
dp lazy
dp own
h_note "own: $(lc_fact own-connect)"
[ "$(lc_fact own-connect)" = "ok calls 1" ] || h_fail "the library's own connect was not the one called: $(lc_fact own-connect)"
dp fail
h_note "fail: $(lc_fact fail)"
if [ -z "${SAN:-}" ]; then
    dp sub
    h_note "sub: $(grep '^sub-open' "$T/lc.out" | paste -sd';')"
    dp plain
    h_note "plain: $(lc_fact plain-open)"
else
    h_note "SAN=$SAN: modes sub and plain left out (the sanitizer's dlopen is the caller the loader sees)"
fi

lc_setup 30000 1 20000
dp queued
h_note "queued: while the cap was full: $(lc_fact while-full); after the release: $(lc_fact after-release)"
[ "$(lc_fact while-full)" = in-progress ] || h_fail "the library's connect got through a full cap: $(lc_fact while-full)"
[ "$(lc_fact after-release)" = connected ] || h_fail "the library's queued connect: $(lc_fact after-release)"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left"
echo ok
