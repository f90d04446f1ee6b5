# names_fork.sh -- a process whose rules name hosts (so it keeps a map of resolved names) forks: the child's
# lookups and name-matched connects work and are capped (the map's lock, taken around the fork, used to stay
# write-locked in the child, whose first such connect then hung for ever).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
NSSW=$(dpkg -L libnss-wrapper 2>/dev/null | grep '/libnss_wrapper\.so$' | head -n1)
[ -r "$NSSW" ] || h_fail "libnss_wrapper.so not found (Debian package libnss-wrapper)"
if [ "${SAN:-}" = tsan ]; then echo "skipped under SAN=tsan: nss_wrapper's own locking trips ThreadSanitizer"; exit 77; fi
printf '127.0.0.1 api.partner.test\n' > "$T/hosts"
export NSS_WRAPPER_HOSTS="$T/hosts"
[ -n "${SAN:-}" ] && export NSS_WRAPPER_DISABLE_DEEPBIND=1
h_redis_start
h_server_start 600000
h_conf "$LC_CONF" lc 100 30000 20000 "api.partner.test:$SRV_PORT"
LC_PRELOAD="$LIB:$NSSW" lc_run forkname api.partner.test
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left"
echo ok
