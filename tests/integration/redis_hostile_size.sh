# redis_hostile_size.sh -- replies announcing 2^31 elements or 2 GB strings, or nested 100 deep, are refused at their header (connection dropped, counted by the breaker): the program stays small and its connect quick; the conncap command too.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/fakeredis.sh"
h_server_start 0
for mode in bigarray bigbulk deep; do
    fr_start --mode "$mode"
    fr_conf "$T/c.conf" api 0 "127.0.0.1:$SRV_PORT"
    fr_measure shim 30 env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/failclient" try 127.0.0.1 "$SRV_PORT" 3
    h_note "$mode: exit $M_RC after $M_MS ms (killed: $M_KILLED), peak $M_KB kB: $(paste -sd' ' "$T/shim.out")"
    [ "$M_KILLED" = none ] || h_fail "$mode: the program was killed ($M_KILLED) after $M_MS ms, peak $M_KB kB"
    [ "$M_RC" -eq 0 ] || h_fail "$mode: the program exited $M_RC"
    [ "$(grep -c '^ECONNREFUSED ' "$T/shim.out")" -eq 3 ] || h_fail "$mode: connects: $(cat "$T/shim.out")"
    [ "$M_KB" -lt 65536 ] || h_fail "$mode: peak memory $M_KB kB"
    [ "$M_MS" -lt 2000 ] || h_fail "$mode: 3 connects took $M_MS ms"
    grep -q "cap\|deeper" "$T/shim.err" || h_fail "$mode: no reason logged: $(cat "$T/shim.err")"

    fr_measure cli 30 "$CLI" holders -c "$T/c.conf" api
    h_note "$mode: conncap holders: exit $M_RC after $M_MS ms, peak $M_KB kB: $(head -c 150 "$T/cli.err")"
    [ "$M_KILLED" = none ] || h_fail "$mode: conncap holders was killed ($M_KILLED), peak $M_KB kB"
    [ "$M_RC" -eq 2 ] || h_fail "$mode: conncap holders exited $M_RC, want 2"
    [ "$M_KB" -lt 65536 ] || h_fail "$mode: conncap holders peak memory $M_KB kB"
    grep -q "cap\|deeper" "$T/cli.err" || h_fail "$mode: conncap holders gave no reason: $(cat "$T/cli.err")"
done
echo ok
