# config_hostile_start.sh -- configurations libconfig cannot read (an @include of a directory, of /proc/self/mem,
# of a FIFO; a FIFO or /proc/self/mem as the file; 4 MiB; 1 MiB of worst case) at a program's first connect: the
# program keeps its own exit status, its connects pass through at once, its peak memory stays small, the error
# is logged once with file and line; `conncap check` says the same and exits 2. A group- or world-readable
# password_file is a warning in `conncap check`.
. "$(dirname "$0")/../lib/harness.sh"
h_server_start 0
mkdir "$T/dir"
mkfifo "$T/fifo"
# peak memory (KB): generous; a sanitizer runtime costs more
MAX_KB=65536; [ -n "${SAN:-}" ] && MAX_KB=1048576

# start NAME CONFIG WANT: two connects under the shim with CONFIG; WANT is in the one log line
start() {
    local name=$1 conf=$2 want=$3 rc kb n
    timeout 60 /usr/bin/time -f '%M' -o "$T/$name.kb" env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$conf" \
        "$PROGS/failclient" try 127.0.0.1 "$SRV_PORT" 2 >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
    [ $rc -ne 124 ] || h_fail "$name: the program hung (killed after 60 s)"
    [ $rc -eq 0 ] || h_fail "$name: the program's exit status is $rc, not its own 0: $(cat "$T/$name.err")"
    [ "$(grep -c '^ok ' "$T/$name.out")" -eq 2 ] || h_fail "$name: connects did not pass through: $(cat "$T/$name.out")"
    awk '$2 > 5000 { bad = 1 } END { exit bad }' "$T/$name.out" ||
        h_fail "$name: a connect took over 5 s: $(cat "$T/$name.out")"
    kb=$(tail -n 1 "$T/$name.kb")
    [ "$kb" -le "$MAX_KB" ] || h_fail "$name: peak memory $kb KB (over $MAX_KB KB)"
    n=$(grep -c 'bad configuration, passing every connection through' "$T/$name.err")
    [ "$n" -eq 1 ] || h_fail "$name: want one log line, got $n: $(cat "$T/$name.err")"
    grep -qF -- "$want" "$T/$name.err" || h_fail "$name: the log line lacks \"$want\": $(cat "$T/$name.err")"
    h_note "$name: passed through, $(awk '{ print $2 }' "$T/$name.out" | paste -sd/) ms, peak ${kb} KB"
}

# check NAME CONFIG WANT: conncap check exits 2 with WANT on stderr
check() {
    local name=$1 conf=$2 want=$3 rc
    timeout 60 "$CLI" check -c "$conf" >"$T/$name.check.out" 2>"$T/$name.check.err"
    rc=$?
    [ $rc -ne 124 ] || h_fail "check $name: hung"
    [ $rc -eq 2 ] || h_fail "check $name: exit $rc, want 2: $(cat "$T/$name.check.err")"
    grep -qF -- "conncap: $want" "$T/$name.check.err" ||
        h_fail "check $name: stderr lacks \"conncap: $want\": $(cat "$T/$name.check.err")"
}

both() { start "$@"; check "$@"; }

printf 'log_level = "info";\n\n@include "%s"\n' "$T/dir" > "$T/incdir.conf"
both incdir "$T/incdir.conf" "$T/incdir.conf:3: @include \"$T/dir\": $T/dir: cannot open: Is a directory"
printf '# reads fail with EIO\n@include "/proc/self/mem"\n' > "$T/incmem.conf"
both incmem "$T/incmem.conf" "$T/incmem.conf:2: @include \"/proc/self/mem\": /proc/self/mem: cannot read"
printf 'log_level = "info";\n@include "fifo" # relative to this file\n' > "$T/incfifo.conf"
both incfifo "$T/incfifo.conf" "$T/incfifo.conf:2: @include \"fifo\": $T/fifo: is a FIFO, not a regular file"
both fifo "$T/fifo" "$T/fifo: is a FIFO, not a regular file"
both mem /proc/self/mem "/proc/self/mem: cannot read: Input/output error"
python3 -c 'import sys; sys.stdout.write("a = \"" + "x" * (4 << 20) + "\";\n")' > "$T/huge.conf"
both huge "$T/huge.conf" "$T/huge.conf: is larger than 1048576 bytes"
# just under the cap, the shapes that were quadratic: one long string, a group of many settings
python3 -c 'import sys; sys.stdout.write("a = \"" + "x" * ((1 << 20) - 8) + "\";\n")' > "$T/long.conf"
both long "$T/long.conf" "$T/long.conf:1: a: unknown setting"
python3 -c 'import sys; sys.stdout.write("".join("a%d = 1;\n" % i for i in range(80000)))' > "$T/group.conf"
both group "$T/group.conf" "$T/group.conf:65: more than 64 settings in one group"

# the password file: group- or world-readable is a warning; the exit code is check's usual one
h_redis_start
printf 'pw\n' > "$T/secret"
chmod 644 "$T/secret"
printf 'redis = { socket = "%s";\n  password_file = "%s"; };\n' "$REDIS_SOCK" "$T/secret" > "$T/pw.conf"
"$CLI" check -c "$T/pw.conf" >"$T/pw.out" 2>"$T/pw.err"; rc=$?
grep -q "conncap check: warning: .*pw.conf:2: redis.password_file: $T/secret is readable by group and others (mode 0644)" \
    "$T/pw.err" || h_fail "check: no warning for a password_file of mode 0644: $(cat "$T/pw.err")"
chmod 600 "$T/secret"
"$CLI" check -c "$T/pw.conf" >"$T/pw.out" 2>"$T/pw2.err"; rc2=$?
[ "$rc" -eq "$rc2" ] || h_fail "check: the warning changed the exit code ($rc, $rc2 without it)"
! grep -q "readable by" "$T/pw2.err" || h_fail "check: a warning for a password_file of mode 0600"
h_note "check: password_file 0644 warned, 0600 not (exit $rc both)"
