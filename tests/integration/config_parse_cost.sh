# config_parse_cost.sh -- parsing cost is linear: 1 MiB (the cap) of each shape that was quadratic (one long
# string, a group of many settings, a long list, many semaphores) costs a bounded number of instructions
# (callgrind's count, not time: the machine is shared), well under what the old quadratic parse needed.
. "$(dirname "$0")/../lib/harness.sh"
if [ -n "${SAN:-}" ] || ! command -v valgrind >/dev/null; then
    echo "skipped: needs valgrind and a build without sanitizers"; exit 77
fi
MAX=1500000000   # instructions; the worst shape below costs about 0.7e9
cost() { # NAME PYTHON-EXPR: conncap check of the text EXPR prints
    local name=$1 ir
    python3 -c "import sys; t = $2; assert len(t) <= 1 << 20, len(t); sys.stdout.write(t)" > "$T/$name.conf"
    timeout 240 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$CLI" check -c "$T/$name.conf" \
        >"$T/$name.out" 2>"$T/$name.err"
    ir=$(sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$T/$name.err" | tail -n 1)
    [ -n "$ir" ] || h_fail "$name: no instruction count (valgrind timed out or failed): $(tail -n 3 "$T/$name.err")"
    [ "$ir" -le "$MAX" ] || h_fail "$name: $ir instructions for $(wc -c < "$T/$name.conf") bytes (over $MAX)"
    h_note "$name: $ir instructions for $(wc -c < "$T/$name.conf") bytes"
}
cost longstring '"a = \"" + "x" * ((1 << 20) - 8) + "\";\n"'
cost group '"".join("a%d = 1;" % i for i in range(110000))[:(1 << 20) - 1] + "\n"'
cost intlist '"a = [" + ",".join(["1"] * 524000) + "];\n"'
cost strings '"a = " + "\"x\" " * 262000 + ";\n"'
cost semaphores '"semaphores = (" + ",".join("{name=\"s%d\";limit=1;}" % i for i in range(1024)) + ");\nrules = (" + ",".join("{semaphore=\"s%d\";match=(\"1.2.3.4\");}" % (i % 1024) for i in range(20000)) + ");\n"'

# What the shim's constructor costs a process that never connects (issue 24: it reads the configuration
# when the library is loaded): /bin/true, callgrind's count of the whole process, with the shim and each
# kind of file, against the shim with no file at all (what loading the library itself costs). A file that
# names no other file is only read (parsed at the first connect: it has nothing else that could be read too
# late); one that names a password_file (or an @include, TLS files, password_env) is parsed at load, so
# that those are read while the process still can.
startup() { # NAME [CONFIG]: prints the instruction count of /bin/true under the shim
    timeout 120 env LD_PRELOAD="$LIB" CONNCAP_CONFIG="${2:-$T/none.conf}" \
        valgrind --tool=callgrind --callgrind-out-file=/dev/null /bin/true 2>"$T/start.$1.err"
    sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$T/start.$1.err" | tail -n 1
}
printf 'secret\n' > "$T/pw"
chmod 600 "$T/pw"
rest='semaphores = ( { name = "s"; limit = 4; } );\nrules = ( { semaphore = "s"; match = ( "10.0.0.0/8:443", "api.example.com" ); } );\n'
printf "redis = { host = \"127.0.0.1\"; };\n$rest" > "$T/small.conf"
printf "redis = { host = \"127.0.0.1\"; password_file = \"%s\"; };\n$rest" "$T/pw" > "$T/pw.conf"
bare=$(timeout 120 valgrind --tool=callgrind --callgrind-out-file=/dev/null /bin/true 2>&1 | sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' | tail -n 1)
none=$(startup none)
small=$(startup small "$T/small.conf")
pw=$(startup pw "$T/pw.conf")
ref=$(startup reference "$ROOT/conf/conncap.conf")
[ -n "$bare" ] && [ -n "$none" ] && [ -n "$small" ] && [ -n "$pw" ] && [ -n "$ref" ] || h_fail "no instruction count: $(tail -n 3 "$T"/start.*.err)"
h_note "/bin/true: $bare instructions alone, $none with the shim loaded (no file); the file read at load: +$((small - none)) ($(wc -c <"$T/small.conf") bytes, parsed at the first connect); parsed at load with its password_file: +$((pw - none)) ($(wc -c <"$T/pw.conf") bytes); the reference configuration parsed at load: +$((ref - none)) ($(wc -c <"$ROOT/conf/conncap.conf") bytes, mostly comments)"
[ $((small - none)) -le 30000 ] || h_fail "reading a small file at load costs $((small - none)) instructions, want <= 30000"
[ $((pw - none)) -le 400000 ] || h_fail "loading a small file with its password_file at load costs $((pw - none)) instructions, want <= 400000"
[ $((ref - none)) -le 1500000 ] || h_fail "loading the reference configuration at load costs $((ref - none)) instructions, want <= 1500000"
