# names_explain.sh -- `conncap explain HOST[:PORT]`: the rule, semaphore and reason, resolving as the shim would;
# exit 0 matched, 1 not matched, 2 usage or config error.
. "$(dirname "$0")/../lib/harness.sh"
NSSW=$(dpkg -L libnss-wrapper 2>/dev/null | grep '/libnss_wrapper\.so$' | head -n1)
[ -r "$NSSW" ] || h_fail "libnss_wrapper.so not found (Debian package libnss-wrapper)"
if [ "${SAN:-}" = tsan ]; then echo "skipped under SAN=tsan: nss_wrapper's own locking trips ThreadSanitizer"; exit 77; fi
printf '127.0.0.1 api.partner.test\n127.0.0.1 other.test\n127.0.0.5 res.test\n::1 six.wild.test\n' > "$T/hosts"
export NSS_WRAPPER_HOSTS="$T/hosts"
[ -n "${SAN:-}" ] && export NSS_WRAPPER_DISABLE_DEEPBIND=1
cat > "$T/c.conf" <<'CONF'
semaphores = ( { name = "api"; limit = 2; }, { name = "net"; limit = 9; }, { name = "res"; limit = 1; } );
rules = (
  { semaphore = "api"; match = ( "api.partner.test:8080", "*.wild.test" ); },
  { semaphore = "net"; match = ( "127.0.0.0/8:9000-9100" ); },
  { semaphore = "res"; match = ( "res.test" ); resolve = true; }
);
CONF
ex() { # WANT_EXIT DEST PATTERN...: runs explain, checks the exit status and that each PATTERN is in the output
    local want=$1 dest=$2; shift 2
    out=$(LD_PRELOAD="${SAN:+${LIB%%:*}:}$NSSW" "$CLI" explain -c "$T/c.conf" "$dest" 2>&1); rc=$?
    [ "$rc" -eq "$want" ] || h_fail "explain $dest: exit $rc, want $want: $out"
    local p
    for p in "$@"; do echo "$out" | grep -qF -- "$p" || h_fail "explain $dest: no \"$p\" in: $out"; done
}
ex 0 api.partner.test:8080 '127.0.0.1:8080: rule 1 (' 'semaphore "api" (limit 2' \
    'because the name api.partner.test (looked up by the program) matches pattern "api.partner.test:8080"' \
    'matched: rule 1, semaphore "api"'
ex 1 api.partner.test:80 '127.0.0.1:80: no rule matches' 'not matched'
ex 1 other.test:8080 '127.0.0.1:8080: no rule matches: not capped'
ex 0 other.test:9050 'rule 2' 'because the address matches pattern "127.0.0.0/8:9000-9100"' 'semaphore "net"'
# an address only a resolve = true name leads to
ex 0 127.0.0.5:443 'because the name res.test (looked up by the shim: resolve = true in rule 3) matches pattern "res.test"' \
    'matched: rule 3, semaphore "res"'
ex 1 127.0.0.6:443 'no rule matches'
# wildcards, IPv6, no port
ex 0 six.wild.test '[::1] (any port): rule 1' 'matches pattern "*.wild.test"'
ex 1 '[::1]:80' '[::1]:80: no rule matches'
ex 0 api.partner.test 'patterns limited to ports were taken as matching'
# a name that does not resolve: what its name alone would match
ex 0 nope.wild.test 'does not resolve' 'by name alone: rule 1'
ex 1 nope.test:80 'does not resolve' 'by name alone: no rule matches'
# usage and config errors
ex 2 'bad host' 'not an IP address or a valid host name'
ex 2 a.b:0 'the port must be 1-65535'
ex 2 a.b:http 'the port must be 1-65535'
out=$("$CLI" explain -c "$T/c.conf" 2>&1); [ $? -eq 2 ] || h_fail "explain without a destination: $out"
out=$("$CLI" explain -c "$T/c.conf" a.test b.test 2>&1); [ $? -eq 2 ] || h_fail "explain with two destinations: $out"
printf 'rules = ( { semaphore = "x"; match = ( "a.test" ); } );\n' > "$T/bad.conf"
out=$("$CLI" explain -c "$T/bad.conf" a.test 2>&1); rc=$?
[ $rc -eq 2 ] || h_fail "explain with a bad config: exit $rc"
echo "$out" | grep -q 'bad.conf:1: rules\[0\].semaphore' || h_fail "bad config message: $out"
echo ok
