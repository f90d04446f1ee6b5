#!/bin/sh
# fnlen.sh -- lists the C functions longer than a screen: the lines between a
# function's opening brace and its closing brace, both at column 0 (the
# style .clang-format keeps). Usage: mk/fnlen.sh [-m MAX] FILE...; MAX
# defaults to 60. Prints "LINES FILE:LINE NAME" for each one over MAX and
# exits 1 when there is any, 0 otherwise.
max=60
if [ "$1" = -m ]; then max=$2; shift 2; fi
awk -v max="$max" '
FNR == 1 { head = ""; hline = 0; open = 0 }
/^\{/ && !open { open = FNR; next }
/^\}/ && open {
    n = FNR - open - 1
    if (n > max) {
        name = head; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
        printf "%d\t%s:%d\t%s\n", n, FILENAME, hline, name; bad = 1
    }
    open = 0; next
}
!open && /\(/ && /^[A-Za-z_]/ { head = $0; hline = FNR }
END { exit bad }' "$@"
