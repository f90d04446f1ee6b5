# run_uncapped.sh -- conncap run and conncap check --program say plainly when a program cannot be capped: statically linked (also a static PIE), a Go program (its build-id note, found by its PT_NOTE or its section, or a .go.buildinfo section; a real Go binary too when go is installed), setuid or setgid (secure-execution mode), also behind a #! script or "env NAME"; they find it as exec does ($PATH) and say nothing of a dynamic program or a setuid one that changes no id; the exit status stays the program's (check: 0) unless --refuse-uncapped asks (run: 125, the program not run; check: 2); malformed ELF headers are read safely.
. "$(dirname "$0")/../lib/harness.sh"
command -v objcopy >/dev/null || { echo "skipped: objcopy (binutils) is not installed"; exit 77; }
B="$T/bin"
mkdir -p "$B"
CONF="$T/c.conf"
cat > "$CONF" <<'CONF'
redis = { host = "127.0.0.1"; port = 1; };
semaphores = ( { name = "u"; limit = 1; } );
rules = ( { semaphore = "u"; match = ( "127.0.0.1:9" ); } );
CONF
printf '#include <stdio.h>\nint main(void) { puts("ran"); return 7; }\n' > "$T/hello.c"
build() { ${CC:-cc} -o "$B/$1" "$T/hello.c" "${@:2}" 2>>"$T/cc.err" || h_fail "cannot build $1: $(tail -n 3 "$T/cc.err")"; }
build dyn
build static -static
build spie -static-pie
# the note the Go linker writes: name "Go\0\0", type 4 (GO BUILDID), in an SHT_NOTE section (so a PT_NOTE)
note() { printf '\t.section %s,"a",@note\n\t.p2align 2\n\t.long 4, 12, 4\n\t.ascii "Go\\0\\0"\n\t.ascii "abcdefghijkl"\n\t.section .note.GNU-stack,"",@progbits\n' "$1" > "$T/$2.s"; }
note .note.go.buildid gonote
note .note.other goptnote   # only the PT_NOTE's content tells
build gonote "$T/gonote.s"
build goptnote "$T/goptnote.s"
readelf -n "$B/goptnote" | grep -q 'GO BUILDID' || h_fail "the crafted Go note is not a PT_NOTE: $(readelf -n "$B/goptnote")"
printf x > "$T/x.bin"
objcopy --add-section .go.buildinfo="$T/x.bin" "$B/dyn" "$B/gobuildinfo"
printf '#!%s\n' "$B/static" > "$B/script-static"
printf '#!/usr/bin/env gonote\n' > "$B/script-env-go"
printf '#!%s\n' "$B/dyn" > "$B/script-dyn"
chmod 755 "$B"/script-*
head -c 200 "$B/dyn" > "$B/truncated"
python3 - "$B/dyn" "$B/badphoff" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<Q", b, 0x20, 0x7fffffffffff0000)  # e_phoff far beyond the file
struct.pack_into("<Q", b, 0x28, 0x10)                 # e_shoff inside the headers
open(sys.argv[2], "wb").write(b)
PY
chmod 755 "$B/truncated" "$B/badphoff"

# chk NAME: conncap check --program NAME; its "program" line in $line, its status in $rc
chk() {
    "$CLI" check --offline -c "$CONF" --program "$@" >"$T/chk.out" 2>"$T/chk.err"
    rc=$?
    line=$(grep '^program ' "$T/chk.out")
}
want() { # NAME REGEX: the program line of NAME matches REGEX and check exits 0
    chk "$1"
    h_note "$line"
    [ "$rc" -eq 0 ] || h_fail "check --program $1 exited $rc: $(cat "$T/chk.err")"
    echo "$line" | grep -Eq "$2" || h_fail "check --program $1: want /$2/, got: $line $(cat "$T/chk.err")"
}
want "$B/dyn" "^program $B/dyn: can be capped \(dynamic loader /"
want "$B/static" "^program $B/static: cannot be capped: it is statically linked"
want "$B/spie" "cannot be capped: it is statically linked"
want "$B/gonote" "cannot be capped: it is a Go program"
want "$B/goptnote" "cannot be capped: it is a Go program"
want "$B/gobuildinfo" "cannot be capped: it is a Go program"
want "$B/script-static" "^program $B/script-static \(run by $B/static\): cannot be capped: it is statically linked"
want "$B/script-dyn" "\(run by $B/dyn\): can be capped"
PATH="$B:$PATH" want script-env-go "^program $B/script-env-go \(run by $B/gonote\): cannot be capped: it is a Go program"
PATH="$B:$PATH" want static "^program $B/static: cannot be capped"
want "$B/truncated" "^program $B/truncated: cannot tell whether it can be capped: its ELF headers cannot be read"
want "$B/badphoff" "^program $B/badphoff: cannot tell whether it can be capped"

chk nosuchprogram-xyz
[ "$rc" -eq 2 ] && grep -q 'not found along \$PATH' "$T/chk.err" || h_fail "check --program of a missing program: rc $rc, $(cat "$T/chk.err")"
chk "$B/static" --refuse-uncapped
[ "$rc" -eq 2 ] || h_fail "check --program static --refuse-uncapped exited $rc, want 2"
chk "$B/dyn" --refuse-uncapped
[ "$rc" -eq 0 ] || h_fail "check --program dyn --refuse-uncapped exited $rc, want 0"
json=$("$CLI" check --offline --json -c "$CONF" --program "$B/script-static") || h_fail "check --json failed"
python3 -c 'import json, sys; p = json.loads(sys.argv[1])["program"]
assert p["cappable"] is False and p["reasons"] == ["static"] and p["runs"].endswith("/static"), p' "$json" ||
    h_fail "check --json: $json"

# set-id: a copy of secureprobe (it prints AT_SECURE) owned by nobody / group nogroup, run by root
if [ "$(id -u)" -eq 0 ]; then
    chmod 755 "$T"
    cp "$PROGS/secureprobe" "$B/suid"; chown nobody "$B/suid"; chmod 4755 "$B/suid"
    cp "$PROGS/secureprobe" "$B/sgid"; chgrp nogroup "$B/sgid"; chmod 2755 "$B/sgid"
    cp "$PROGS/secureprobe" "$B/suidself"; chmod 4755 "$B/suidself"   # root's own: no id changes
    if [ "$("$B/suid" | cut -d' ' -f2)" = 1 ] && [ "$("$B/suidself" | cut -d' ' -f2)" = 0 ]; then
        want "$B/suid" "cannot be capped: it is setuid: the loader runs it in secure-execution mode"
        want "$B/sgid" "cannot be capped: it is setgid"
        want "$B/suidself" "can be capped"
    else
        h_note "set-id parts skipped: setuid does not take effect here (nosuid or no_new_privs)"
    fi
else
    h_note "set-id parts skipped: not root (a setuid copy must belong to another user)"
fi

# a real Go binary, with and without cgo, when a Go toolchain is installed
if command -v go >/dev/null; then
    mkdir -p "$T/go" && printf 'package main\nimport "fmt"\nfunc main() { fmt.Println("ran") }\n' > "$T/go/main.go"
    for cgo in 0 1; do
        (cd "$T/go" && HOME="$T" GOCACHE="$T/gocache" GO111MODULE=off CGO_ENABLED=$cgo go build -o "$B/go$cgo" main.go) \
            2>>"$T/go.err" || h_fail "go build (CGO_ENABLED=$cgo): $(tail -n 3 "$T/go.err")"
        want "$B/go$cgo" "cannot be capped: it is a Go program"
    done
else
    h_note "no Go toolchain: the real Go binary part skipped (the crafted notes above stand in)"
fi

# conncap run: the warning, the program's own status; --refuse-uncapped: 125 and not run
runit() { out=$(cd "$T" && "$CLI" run -c "$CONF" "$@" 2>"$T/run.err"); rc=$?; err=$(cat "$T/run.err"); }
runit -- "$B/static"
h_note "run static: exit $rc, out '$out', stderr: $err"
[ "$rc" -eq 7 ] && [ "$out" = ran ] || h_fail "run static: exit $rc, out '$out' (want the program's 7 and its output)"
echo "$err" | grep -q "^conncap run: warning: $B/static cannot be capped: it is statically linked.*; it runs uncapped$" ||
    h_fail "run static said: '$err'"
PATH="$B:$PATH" runit -- gonote
echo "$err" | grep -q "^conncap run: warning: $B/gonote cannot be capped: it is a Go program" || h_fail "run gonote (by \$PATH) said: '$err'"
runit --refuse-uncapped -- "$B/static"
h_note "run --refuse-uncapped static: exit $rc, out '$out', stderr: $err"
[ "$rc" -eq 125 ] && [ -z "$out" ] || h_fail "run --refuse-uncapped static: exit $rc, out '$out' (want 125, not run)"
echo "$err" | grep -q "not run (--refuse-uncapped)$" || h_fail "run --refuse-uncapped said: '$err'"
if [ -z "${SAN:-}" ]; then   # a dynamic program hosts the shim (a sanitizer-built one needs its runtime first)
    runit --refuse-uncapped -- "$B/dyn"
    [ "$rc" -eq 7 ] && [ "$out" = ran ] && [ -z "$err" ] || h_fail "run --refuse-uncapped dyn: exit $rc, out '$out', stderr '$err'"
    if [ -x "$B/suid" ] && [ "$("$B/suid" | cut -d' ' -f2)" = 1 ]; then
        runit -- "$B/suid"
        echo "$err" | grep -q "warning: $B/suid cannot be capped: it is setuid" || h_fail "run suid said: '$err'"
    fi
fi
echo ok
