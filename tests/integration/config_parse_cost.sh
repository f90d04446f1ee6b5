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
