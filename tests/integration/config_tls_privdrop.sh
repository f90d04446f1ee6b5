# config_tls_privdrop.sh -- the TLS files the configuration names are read with it, when the shim is loaded (issue 24): a
# process that drops privileges before its first connect still has its CA, client certificate and key.
# Redis over TLS with client certificates required; the CA, the certificate and the key (0600) in a 0700
# directory; the configuration itself readable. privclient drops to nobody in main, then 6 threads connect,
# limit 2: capped at 2, every connect answered, nothing said about TLS files.
. "$(dirname "$0")/../lib/harness.sh"
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (the program drops to nobody)"; exit 77; }
command -v openssl >/dev/null || { echo "skipped: no openssl"; exit 77; }
h_tls_certs
h_redis_tls_start redis yes
chmod 0711 "$T"
K="$T/keys"
mkdir -m 0700 "$K"
cp "$TLS_DIR/ca.pem" "$TLS_DIR/client.pem" "$TLS_DIR/client.key" "$K/"
chmod 0600 "$K"/*
h_server_start 300
cat > "$T/c.conf" <<CONF
redis = { url = "rediss://127.0.0.1:$REDIS_TLS_PORT"; connect_timeout_ms = 1000; command_timeout_ms = 1000;
          tls = { ca_file = "$K/ca.pem"; cert_file = "$K/client.pem"; key_file = "$K/client.key"; }; };
semaphores = ( { name = "tp"; limit = 2; lease_ms = 30000; wait_timeout_ms = 20000; } );
rules = ( { semaphore = "tp"; match = ( "127.0.0.1:$SRV_PORT" ); } );
on_redis_down = "open";
CONF
chmod 0644 "$T/c.conf"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/privclient" --drop 65534:65534 "$SRV_PORT" 6 >"$T/out" 2>"$T/err"
h_note "as nobody after load: $(tail -n 1 "$T/out"); upstream max $(h_server_stat max), total $(h_server_stat total); the shim said: $(sed 's/^conncap\[[0-9]*\]: //' "$T/err" | sort | uniq -c | paste -sd'|' -)"
grep -qx 'ok 6 fail 0' "$T/out" || h_fail "$(tail -n 1 "$T/out")"
grep -qi 'tls\|redis unreachable' "$T/err" && h_fail "the shim could not use Redis over TLS: $(cat "$T/err")"
max=$(h_server_stat max)
[ "$max" -le 2 ] || h_fail "cap exceeded: the upstream saw $max, limit 2"
[ "$max" -eq 2 ] || h_fail "the cap of 2 was never reached (max $max)"
WAIT_S=5 h_wait_for h_holders_is tp 0 || h_fail "holders left: $(h_rcli zrange 'conncap:{tp}:holders' 0 -1)"
echo ok
