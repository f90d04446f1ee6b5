# secure_env.sh -- a setgid program (secure-execution mode, AT_SECURE) ignores every CONNCAP_* variable:
# CONNCAP_PERMITS never makes it release a holder it was handed (another process's, say), malformed or not,
# and CONNCAP_CONFIG never points it at a configuration of the caller's choosing. The same program without
# the setgid bit honours both (the contrast shows the test can see them). Runs as root: the setgid copy
# belongs to group nogroup, so root's exec of it changes the effective gid.
. "$(dirname "$0")/../lib/harness.sh"
if [ -n "${SAN:-}" ]; then echo "skipped under SAN=$SAN: a setgid program with a sanitizer runtime"; exit 77; fi
if [ "$(id -u)" -ne 0 ]; then echo "skipped: needs root to make a setgid copy"; exit 77; fi
h_redis_start
h_server_start 600000
CONF="$T/c.conf"
LOG_LEVEL=debug h_conf "$CONF" sec 10 30000 1000 "127.0.0.1:$SRV_PORT"
cp "$PROGS/secureprobe" "$T/plain"
cp "$PROGS/secureprobe" "$T/sgid"
chgrp nogroup "$T/sgid" && chmod 2755 "$T/sgid" || h_fail "cannot make a setgid copy"
chmod 755 "$T"
[ "$("$T/sgid" | cut -d' ' -f2)" = 1 ] || { echo "skipped: setgid does not take effect here (nosuid or no_new_privs)"; exit 77; }
[ "$("$T/plain" | cut -d' ' -f2)" = 0 ] || h_fail "the plain copy runs in secure mode"

# run PROG PERMITS-VALUE-AFTER-PID [PORT]: PROG with CONNCAP_CONFIG and a
# CONNCAP_PERMITS for its own pid (exec keeps bash's pid); stderr in $T/PROG.err
run() {
    local prog=$1 rest=$2
    CONNCAP_CONFIG="$CONF" bash -c 'exec env CONNCAP_PERMITS="1:$$:$1" "$2" ${3:+"$3"}' _ "$rest" "$T/$prog" "${3:-}" \
        >/dev/null 2>"$T/$prog.err"
}
future=$(( ($(date +%s) + 3600) * 1000 ))
# a handed-over entry whose socket is gone (fd 0 is no socket): the shim gives it back in Redis
h_rcli zadd 'conncap:{sec}:holders' "$future" victim-plain "$future" victim-sgid >/dev/null
run plain "0,1,1,30000,sec,victim-plain" "$SRV_PORT" || h_fail "the plain copy failed: $(cat "$T/plain.err")"
[ -z "$(h_rcli zscore 'conncap:{sec}:holders' victim-plain)" ] || h_fail "the plain copy did not act on CONNCAP_PERMITS"
grep -q "loaded $CONF" "$T/plain.err" || h_fail "the plain copy did not read CONNCAP_CONFIG: $(cat "$T/plain.err")"
run sgid "0,1,1,30000,sec,victim-sgid" "$SRV_PORT" || h_fail "the setgid copy failed: $(cat "$T/sgid.err")"
[ -n "$(h_rcli zscore 'conncap:{sec}:holders' victim-sgid)" ] || h_fail "the setgid copy released a holder named in CONNCAP_PERMITS"
! grep -q "$T" "$T/sgid.err" || h_fail "the setgid copy read CONNCAP_CONFIG: $(cat "$T/sgid.err")"
# malformed: read, it is reported; ignored, nothing is said (no connect: no configuration either)
run plain "garbage"
grep -q "CONNCAP_PERMITS is malformed" "$T/plain.err" || h_fail "the plain copy did not read a malformed CONNCAP_PERMITS"
run sgid "garbage"
[ ! -s "$T/sgid.err" ] || h_fail "the setgid copy read CONNCAP_PERMITS: $(cat "$T/sgid.err")"
echo ok
