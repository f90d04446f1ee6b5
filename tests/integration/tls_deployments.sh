# tls_deployments.sh -- Sentinel and Cluster over TLS: the sentinels, the master and every cluster node spoken to over TLS only (their TLS ports configured), server_name for the announced addresses, the cap held.
. "$(dirname "$0")/../lib/harness.sh"
h_tls_certs
h_server_start 300
TLSA="--tls-cert-file $TLS_DIR/server.pem --tls-key-file $TLS_DIR/server.key --tls-ca-cert-file $TLS_DIR/ca.pem --tls-auth-clients no"
CLI_TLS=(--tls --cacert "$TLS_DIR/ca.pem")
capconf() {  # FILE REDIS-SETTINGS
    cat > "$1" <<CONF
redis = { $2 connect_timeout_ms = 1000; command_timeout_ms = 1000;
          tls = { ca_file = "$TLS_DIR/ca.pem"; server_name = "localhost"; ${TLS_MORE:-} }; };
semaphores = ( { name = "d"; limit = 2; wait_timeout_ms = 20000; } );
rules = ( { semaphore = "d"; match = ( "127.0.0.1:$SRV_PORT" ); } );
on_redis_down = "closed";
CONF
}
capped() {  # NAME: 6 threads x 2 connects under $T/c.conf, at most 2 at once
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/capclient" 127.0.0.1 "$SRV_PORT" 6 2 >"$T/$1.out" 2>"$T/$1.err" ||
        h_fail "$1: capclient: $(cat "$T/$1.out" "$T/$1.err")"
    h_note "$1: $(tail -n1 "$T/$1.out"), at most $(h_server_stat max) at once (limit 2)"
    [ "$(h_server_stat max)" -le 2 ] || h_fail "$1: the cap did not hold"
    grep -q "conncap" "$T/$1.err" && h_fail "$1: the shim complained: $(cat "$T/$1.err")"
    return 0
}

# ---- Cluster: three masters, TLS on the client port and the bus (tls-cluster); the
# seed and every node the slot map names are TLS ports
mapfile -t P < <(h_free_ports 9)
for k in 0 1 2; do
    mkdir -p "$T/cn$k"
    (cd "$T/cn$k" && exec redis-server --port "${P[$k]}" --tls-port "${P[$((k + 3))]}" --cluster-port "${P[$((k + 6))]}" \
        $TLSA --tls-cluster yes --tls-replication yes --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "$T/cn$k/nodes.conf" --cluster-node-timeout 2000 --dir "$T/cn$k" --save '' \
        --appendonly no --daemonize no --logfile "$T/cn$k.log") &
    _pids+=("$!")
done
for k in 0 1 2; do h_wait_for redis-cli -p "${P[$k]}" ping >/dev/null || h_fail "cluster node $k did not start"; done
redis-cli --cluster create "127.0.0.1:${P[0]}" "127.0.0.1:${P[1]}" "127.0.0.1:${P[2]}" --cluster-yes >"$T/cc.log" 2>&1 ||
    h_fail "cluster create failed: $(tail -n 5 "$T/cc.log")"
WAIT_S=20 h_wait_for sh -c "for p in ${P[0]} ${P[1]} ${P[2]}; do redis-cli -p \$p cluster info | grep -q cluster_state:ok || exit 1; done" ||
    h_fail "cluster not ok"
redis-cli "${CLI_TLS[@]}" -p "${P[3]}" cluster slots | grep -qx "${P[4]}\|${P[5]}" ||
    h_fail "the cluster does not announce its TLS ports to TLS clients: $(redis-cli "${CLI_TLS[@]}" -p "${P[3]}" cluster slots | tr '\n' ' ')"
capconf "$T/c.conf" "cluster = ( \"127.0.0.1:${P[3]}\" );"
"$CLI" check -c "$T/c.conf" >"$T/o" 2>"$T/e" || h_fail "check on the TLS cluster: $(cat "$T/e")"
grep -q "^redis tls: TLSv1" "$T/o" || h_fail "check: no TLS session on the cluster"
"$CLI" setup -c "$T/c.conf" >"$T/setup.out" 2>&1 || h_fail "conncap setup on the TLS cluster: $(cat "$T/setup.out")"
capped cluster
owner=-1
for k in 0 1 2; do [ -n "$(redis-cli -p "${P[$k]}" --scan --pattern 'conncap:{d}:*')" ] && owner=$k; done
[ "$owner" -ge 0 ] || h_fail "no node holds the semaphore's keys"
h_note "cluster: the semaphore lives on node $owner (TLS port ${P[$((owner + 3))]}), seed was ${P[3]}"
# without server_name, the announced 127.0.0.1 is checked against the certificate's IP entry
TLS_MORE="" capconf "$T/c2.conf" "cluster = ( \"127.0.0.1:${P[4]}\" );"
sed -i 's/server_name = "localhost"; //' "$T/c2.conf"
"$CLI" check -c "$T/c2.conf" >"$T/o" 2>"$T/e" || h_fail "check on the TLS cluster by IP: $(cat "$T/e")"

# ---- Sentinel: master and replica over TLS (replication too), three sentinels with a TLS
# port each (and a plain one for the harness's own checks)
mapfile -t S < <(h_free_ports 8)   # master plain/tls, replica plain/tls, sentinels tls x3, spare
SENT_NAME=mymaster
for r in m r; do mkdir -p "$T/s$r"; done
redis-server --port "${S[0]}" --tls-port "${S[1]}" $TLSA --tls-replication yes --bind 127.0.0.1 --dir "$T/sm" \
    --save '' --appendonly no --daemonize no --logfile "$T/sm.log" &
_pids+=("$!")
redis-server --port "${S[2]}" --tls-port "${S[3]}" $TLSA --tls-replication yes --bind 127.0.0.1 --dir "$T/sr" \
    --save '' --appendonly no --daemonize no --logfile "$T/sr.log" --replicaof 127.0.0.1 "${S[1]}" &
_pids+=("$!")
SENT_PLAIN=()
for k in 0 1 2; do
    pp=$(h_free_port); SENT_PLAIN+=("$pp")
    mkdir -p "$T/sen$k"
    cat > "$T/sen$k/sentinel.conf" <<SCONF
port $pp
tls-port ${S[$((k + 4))]}
tls-cert-file $TLS_DIR/server.pem
tls-key-file $TLS_DIR/server.key
tls-ca-cert-file $TLS_DIR/ca.pem
tls-auth-clients no
tls-replication yes
bind 127.0.0.1
daemonize no
dir $T/sen$k
logfile $T/sen$k.log
sentinel monitor $SENT_NAME 127.0.0.1 ${S[1]} 2
sentinel down-after-milliseconds $SENT_NAME 1000
SCONF
    redis-sentinel "$T/sen$k/sentinel.conf" &
    _pids+=("$!")
done
WAIT_S=20 h_wait_for sh -c "redis-cli -p ${S[2]} info replication | grep -q master_link_status:up" ||
    h_fail "the replica did not sync over TLS (see $T/sr.log)"
for pp in "${SENT_PLAIN[@]}"; do
    WAIT_S=20 h_wait_for sh -c "redis-cli -p $pp sentinel get-master-addr-by-name $SENT_NAME | grep -qx ${S[1]}" ||
        h_fail "sentinel $pp does not name the master's TLS port"
done
capconf "$T/c.conf" "sentinels = ( \"127.0.0.1:${S[4]}\", \"127.0.0.1:${S[5]}\", \"127.0.0.1:${S[6]}\" ); master = \"$SENT_NAME\";"
"$CLI" check -c "$T/c.conf" >"$T/o" 2>"$T/e" || h_fail "check via TLS sentinels: $(cat "$T/e")"
grep -q "sentinels over TLS" "$T/o" || h_fail "check does not say the sentinels are spoken to over TLS"
"$CLI" setup -c "$T/c.conf" >"$T/setup.out" 2>&1 || h_fail "conncap setup on the TLS sentinel: $(cat "$T/setup.out")"
capped sentinel
[ -n "$(redis-cli -p "${S[0]}" --scan --pattern 'conncap:{d}:*')" ] || h_fail "the master holds no semaphore keys"
# tls.sentinels = false: plain to the sentinels' plain ports, TLS to the master
TLS_MORE="sentinels = false;" capconf "$T/c.conf" \
    "sentinels = ( \"127.0.0.1:${SENT_PLAIN[0]}\", \"127.0.0.1:${SENT_PLAIN[1]}\" ); master = \"$SENT_NAME\";"
"$CLI" check -c "$T/c.conf" >"$T/o" 2>"$T/e" || h_fail "check via plain sentinels: $(cat "$T/e")"
grep -q "sentinels plain" "$T/o" || h_fail "check does not say the sentinels are plain"
# and TLS to a plain sentinel port fails clearly, bounded
TLS_MORE="" capconf "$T/c.conf" "sentinels = ( \"127.0.0.1:${SENT_PLAIN[0]}\" ); master = \"$SENT_NAME\";"
"$CLI" check -c "$T/c.conf" >"$T/o" 2>"$T/e" && h_fail "TLS to a plain sentinel port passed"
h_note "TLS to a plain sentinel port: $(cat "$T/e")"
grep -q 'no sentinel answered for master "mymaster" (last: redis TLS handshake with 127.0.0.1:[0-9]*: timed out' "$T/e" ||
    h_fail "TLS to a plain sentinel: unclear: $(cat "$T/e")"
echo ok
