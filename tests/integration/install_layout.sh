# install_layout.sh -- make never installs or queries packages (a missing one is one line naming it);
# make install PREFIX/LIBDIR/DESTDIR installs the set (CLI, shim in LIBDIR/conncap/, man pages, example
# config, bash completion) with a CLI that finds that shim even when make ran with other paths -- also
# on a machine where the package is installed (checked in a private mount namespace with its files on /usr);
# make uninstall removes it; the manual pages cover every setting and option.
. "$(dirname "$0")/../lib/harness.sh"
if [ -n "${SAN:-}" ]; then echo "skipped under SAN=$SAN: the install layout is checked on the plain build"; exit 77; fi
# package tools that record being called: make must never run them
mkdir -p "$T/fakebin" "$T/empty"
for p in dpkg-query dpkg apt-get apt sudo; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/pkg.log"\nexit 1\n' "$p" "$T" > "$T/fakebin/$p"
    chmod +x "$T/fakebin/$p"
done
mk() { PATH="$T/fakebin:$PATH" make --no-print-directory -C "$ROOT" BUILD="$T/build" "$@"; }
cp -a "$BUILD" "$T/build"

# make (everything built already): no package tool called
mk >"$T/make.out" 2>&1 || h_fail "make: exit $?: $(tail -5 "$T/make.out")"
[ ! -e "$T/pkg.log" ] || h_fail "make ran package tools: $(cat "$T/pkg.log")"
# a missing dependency: one line naming what pkg-config misses, no package tool
PKG_CONFIG_LIBDIR="$T/empty" PKG_CONFIG_PATH="" mk BUILD="$T/b2" >"$T/miss.out" 2>&1 && h_fail "make without hiredis/libconfig succeeded"
[ "$(wc -l < "$T/miss.out")" -eq 1 ] && grep -q 'missing build dependencies: .*hiredis libconfig openssl' "$T/miss.out" ||
    h_fail "make without the dependencies says: $(cat "$T/miss.out")"
[ ! -e "$T/pkg.log" ] || h_fail "make ran package tools: $(cat "$T/pkg.log")"
[ ! -e "$T/b2" ] || h_fail "make built something without its dependencies"
# OpenSSL's headers alone missing (core/tls.c includes them): the same one line, not a compiler error
mkdir -p "$T/pc-nossl"
for p in hiredis libconfig; do cp "$(pkg-config --variable=pcfiledir "$p")/$p.pc" "$T/pc-nossl/"; done
PKG_CONFIG_LIBDIR="$T/pc-nossl" PKG_CONFIG_PATH="" mk BUILD="$T/b3" >"$T/miss.out" 2>&1 && h_fail "make without openssl succeeded"
[ "$(wc -l < "$T/miss.out")" -eq 1 ] && grep -q 'missing build dependencies: pkg-config finds no openssl (.*libssl-dev' "$T/miss.out" ||
    h_fail "make without OpenSSL's headers says: $(head -3 "$T/miss.out")"
[ ! -e "$T/b3" ] || h_fail "make built something without OpenSSL's headers"

# make ran with the default paths; make install with Debian's, into a staging DESTDIR
multi=x86_64-linux-gnu
paths=(PREFIX=/usr LIBDIR=/usr/lib/$multi DESTDIR="$T/root")
mk install "${paths[@]}" >"$T/install.out" 2>&1 || h_fail "make install: exit $?: $(tail -5 "$T/install.out")"
[ ! -e "$T/pkg.log" ] || h_fail "make install ran package tools: $(cat "$T/pkg.log")"
want="usr/bin/conncap usr/lib/$multi/conncap/libconncap.so usr/share/man/man1/conncap.1 usr/share/man/man5/conncap.conf.5
usr/share/doc/conncap/examples/conncap.conf usr/share/bash-completion/completions/conncap
$(cd "$ROOT" && for f in README.md doc/*.md examples/redis-acl.conf examples/docker/* examples/kubernetes/* \
    examples/systemd/*.service examples/systemd/*.d/* examples/monitoring/*; do echo "usr/share/doc/conncap/$f"; done)"
got=$(cd "$T/root" && find . -type f | sed 's|^\./||' | sort)
[ "$got" = "$(echo "$want" | tr ' ' '\n' | sort)" ] || h_fail "make install put: $got, want $want"
cmp -s "$T/root/usr/share/doc/conncap/examples/conncap.conf" "$ROOT/conf/conncap.conf" || h_fail "example config differs"
# the installed CLI knows its own paths, never the default ones
grep -qa "/usr/lib/$multi/conncap" "$T/root/usr/bin/conncap" || h_fail "the CLI does not know /usr/lib/$multi/conncap"
grep -qa "/usr/local/lib" "$T/root/usr/bin/conncap" && h_fail "the CLI installed at /usr still names /usr/local/lib"
# copies away from any shim: the /usr one, and one built for a prefix nobody installs
mkdir -p "$T/away/bin" "$T/nowhere/bin"
cp "$T/root/usr/bin/conncap" "$T/away/bin/"
mk all PREFIX="$T/nowhere-prefix" >"$T/nowhere.out" 2>&1 || h_fail "make PREFIX=...: $(tail -5 "$T/nowhere.out")"
cp "$T/build/conncap" "$T/nowhere/bin/"
# Which shim each CLI picks, checked as this machine is and, when it can show it (root, a private mount
# namespace, overlayfs), once more with the package installed -- its files overlaid on /usr, as on a
# packager's machine: the staged CLI keeps the shim staged with it and the build tree's its own, never
# the installed one; only a copy of the /usr CLI away from its shim falls back to /usr's, by design.
cat > "$T/cli_checks.sh" <<'CHECKS'
set -u
fail() { echo "FAIL ($where): $*" >&2; exit 1; }
inst="$T/root/usr/lib/$multi/conncap/libconncap.so"
"$T/root/usr/bin/conncap" --version | grep -qx "library: $inst" ||
    fail "installed conncap --version: $("$T/root/usr/bin/conncap" --version)"
out=$("$T/root/usr/bin/conncap" run -c "$ROOT/conf/conncap.conf" -- sh -c 'echo "$LD_PRELOAD"') ||
    fail "installed conncap run: exit $?"
[ "${out%%:*}" = "$inst" ] || fail "installed conncap run preloads $out, want $inst"
"$CLI" --version | grep -qx "library: $(realpath "$LIB")" || fail "the build tree's conncap --version: $("$CLI" --version)"
out=$("$CLI" run -c "$ROOT/conf/conncap.conf" -- sh -c 'echo "$LD_PRELOAD"') || fail "the build tree's conncap run: exit $?"
[ "${out%%:*}" = "$(realpath "$LIB")" ] || fail "the build tree's conncap run preloads $out, want $LIB"
# a CLI away from its shim says so, with 125
"$T/nowhere/bin/conncap" run -c "$ROOT/conf/conncap.conf" -- true 2>"$T/err"; rc=$?
[ $rc -eq 125 ] && grep -q "cannot read the shim $T/nowhere-prefix/lib/conncap/libconncap.so" "$T/err" ||
    fail "CLI without its shim: exit $rc: $(cat "$T/err")"
pkg="/usr/lib/$multi/conncap/libconncap.so"
"$T/away/bin/conncap" run -c "$ROOT/conf/conncap.conf" -- true 2>"$T/err"; rc=$?
if [ -e "$pkg" ]; then
    [ $rc -eq 0 ] && "$T/away/bin/conncap" --version | grep -qx "library: $pkg" ||
        fail "the /usr CLI away from its shim, with $pkg installed: exit $rc: $(cat "$T/err")"
else
    [ $rc -eq 125 ] && grep -q "cannot read the shim $pkg" "$T/err" || fail "the /usr CLI away from its shim: exit $rc: $(cat "$T/err")"
fi
CHECKS
export T ROOT multi CLI LIB
where="this machine" bash "$T/cli_checks.sh" || h_fail "the CLI's shim (see above)"
with_package() { # the staged install overlaid on /usr in a private mount namespace, then the checks
    mount --make-rprivate / && mkdir -p "$T/ovl" && mount -t tmpfs tmpfs "$T/ovl" &&
        mkdir -p "$T/ovl/upper" "$T/ovl/work" && cp -a "$T/root/usr/." "$T/ovl/upper/" &&
        mount -t overlay overlay -o "lowerdir=/usr,upperdir=$T/ovl/upper,workdir=$T/ovl/work" /usr || return 77
    [ -e "/usr/lib/$multi/conncap/libconncap.so" ] || return 77
    where="the package installed" bash "$T/cli_checks.sh"
}
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
    export -f with_package
    unshare -m bash -c with_package; rc=$?
    case $rc in
        0) h_note "checked again with the package's files on /usr (a private mount namespace)" ;;
        77) h_note "cannot overlay /usr here: not checked with the package installed" ;;
        *) h_fail "the CLI's shim with the package installed (see above)" ;;
    esac
else
    h_note "not root: not checked with the package installed"
fi
# the installed man pages render without warnings
if command -v man >/dev/null; then
    for m in man1/conncap.1 man5/conncap.conf.5; do
        w=$(LC_ALL=C.UTF-8 man --warnings -l "$T/root/usr/share/man/$m" 2>&1 >/dev/null)
        [ -z "$w" ] || h_fail "$m: $w"
    done
fi
mk uninstall "${paths[@]}" >"$T/uninstall.out" 2>&1 || h_fail "make uninstall: exit $?: $(cat "$T/uninstall.out")"
left=$(find "$T/root" -type f)
[ -z "$left" ] || h_fail "make uninstall left: $left"

# conncap.conf(5) names every setting of the reference configuration
for s in $(sed -n 's/^[[:space:]]*#\{0,1\}[[:space:]]*\([a-z_]\{2,\}\) = .*/\1/p' "$ROOT/conf/conncap.conf" | sort -u); do
    grep -q "^\.B $s\( \|\$\)" "$ROOT/doc/conncap.conf.5" || h_fail "conncap.conf.5 does not document $s"
done
for s in name limit lease_ms wait_timeout_ms rate burst local_limit restart_grace_ms semaphore match resolve resolve_interval_s; do
    grep -q "^\.B $s\$" "$ROOT/doc/conncap.conf.5" || h_fail "conncap.conf.5 does not document $s"
done
# conncap(1) names every command and every option its usage line gives
"$CLI" help | sed -n 's/^  \([a-z-]*\) .*/\1/p' > "$T/cmds"
[ "$(wc -l < "$T/cmds")" -ge 11 ] || h_fail "conncap help lists: $(cat "$T/cmds")"
while read -r c; do
    grep -q "^\.B conncap ${c//-/\\\\-}$" "$ROOT/doc/conncap.1" || h_fail "conncap.1 has no synopsis for $c"
    for o in $("$CLI" "$c" --help | head -1 | grep -o -- '--[a-z-]*[a-z]'); do
        grep -qF -- "${o//-/\\-}" "$ROOT/doc/conncap.1" || h_fail "conncap.1 does not mention $c $o"
    done
done < "$T/cmds"
# the README says where install puts things
grep -q 'LIBDIR)/conncap/libconncap.so' "$ROOT/README.md" || h_fail "README does not say where the shim is installed"
grep -q 'puts .*/etc/conncap.conf' "$ROOT/README.md" && h_fail "README says install puts /etc/conncap.conf"
echo ok
