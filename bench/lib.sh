# lib.sh -- sourced by the bench scripts: the result table's rows, one format for every section.
# row NAME RESULT TARGET VERDICT: appends one line to the array rows (the caller declares it).
row() { rows+=("$(printf '| %-60s | %-24s | %-8s | %-8s |' "$1" "$2" "$3" "$4")"); }
# verdict VALUE TARGET: "ok" if VALUE <= TARGET, else "MISSED".
verdict() { awk -v v="$1" -v t="$2" 'BEGIN {print (v <= t) ? "ok" : "MISSED"}'; }
