# real_psql.sh -- psql (libpq: a non-blocking connect, queued under the default configuration)
# against a private PostgreSQL cluster (initdb/pg_ctl in a temporary folder, a free port; as user postgres
# when run as root). 10 capped psql sessions at once, each in SELECT pg_sleep: the server never has more
# than the limit of 3 capped sessions (pg_stat_activity, polled by an uncapped psql), reaches it, every
# session succeeds, and no holder is left.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$PGBIN/initdb" ] && [ -x "$PGBIN/psql" ] || { echo "skipped: PostgreSQL (postgresql-15) not installed"; exit 77; }
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
h_redis_start
PGPORT=$(h_free_port)
PGD="$T/pg"
mkdir -p "$PGD"
chmod 755 "$T"
[ "$(id -u)" -eq 0 ] && chown postgres: "$PGD"
as_pg "$PGBIN/initdb" -D "$PGD/data" -A trust -U postgres --no-sync >"$T/initdb.log" 2>&1 || h_fail "initdb failed"
as_pg "$PGBIN/pg_ctl" -D "$PGD/data" -l "$PGD/server.log" -w -t 30 \
    -o "-p $PGPORT -k $PGD -c listen_addresses=127.0.0.1 -c fsync=off" start >"$T/pgctl.log" 2>&1 ||
    h_fail "pg_ctl start failed: $(cat "$PGD/server.log")"
PGPID=$(head -n 1 "$PGD/data/postmaster.pid")
_pids+=("$PGPID")
stop_pg() { as_pg "$PGBIN/pg_ctl" -D "$PGD/data" -m fast -w stop >/dev/null 2>&1; }
trap 'rc=$?; stop_pg; (exit $rc); h_cleanup' EXIT
h_conf "$T/c.conf" pg 3 30000 20000 "127.0.0.1:$PGPORT"
PGAPPNAME=poll "$PGBIN/psql" -X -At -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -c 'select 1' >/dev/null ||
    h_fail "the server does not answer"
# poll: the most capped sessions the server ever had at once
( max=0
  while [ ! -e "$T/stop-poll" ]; do
      n=$("$PGBIN/psql" -X -At -h "$PGD" -p "$PGPORT" -U postgres -d postgres \
          -c "select count(*) from pg_stat_activity where application_name = 'capped'" 2>/dev/null) || n=0
      [ "$n" -gt "$max" ] && max=$n && echo "$max" >"$T/pg-max"
  done ) &
POLL=$!
pids=()
for i in $(seq 10); do
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" PGAPPNAME=capped "$PGBIN/psql" -X -At -h 127.0.0.1 -p "$PGPORT" \
        -U postgres -d postgres -c 'select pg_sleep(0.6)' >"$T/psql.$i.out" 2>&1 &
    pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
touch "$T/stop-poll"
wait $POLL
max=$(cat "$T/pg-max" 2>/dev/null || echo 0)
h_note "10 psql sessions, limit 3: the server had at most $max capped sessions at once; $failed failed"
[ "$failed" -eq 0 ] || h_fail "$failed psql sessions failed: $(cat "$T"/psql.*.out | sort | uniq -c | head -n 5)"
[ "$max" -le 3 ] || h_fail "cap exceeded: $max capped sessions at once, limit 3"
[ "$max" -eq 3 ] || h_fail "the cap of 3 was never reached (max $max)"
[ "$(h_holders pg)" -eq 0 ] || h_fail "holders left: $(h_rcli zrange 'conncap:{pg}:holders' 0 -1)"
echo ok
