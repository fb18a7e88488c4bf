#!/usr/bin/env bash
# Chaos campaigns against a throwaway PostgreSQL 15, in one command:
#
#   bash bench/chaos.sh                          # every campaign, both modes (about 25 minutes)
#   bash bench/chaos.sh --quick                  # fewer repetitions, shorter faults (about 12 minutes)
#   bash bench/chaos.sh --campaigns kill9,readonly --quick
#
# Workload: a keyed `sql` increment. A producer inserts RATE (600) jobs/s into a queue `tx`
# (transaction mode) and LEASE_RATE (150) into a queue `lease` (lease mode, where the sql
# handler runs in the completion transaction), both served by the same WORKERS (2)
# `oncely worker` processes;
# each job adds 1 to counters[key] and logs its idem in `applied` (no unique key there: a
# job applied twice shows). The producer's INSERT of each job also records it in
# `produced`, in the same statement, so what was enqueued is known from the database even
# when the producer's own statements fail during a fault. A worker that exits (or is
# killed) is started again after 0.2 s, as a service manager would.
#
# Each campaign: CLEAN_S seconds clean, the fault (below), AFTER_S seconds after it healed,
# then the producer stops and the queues drain; then, from the database alone, per mode:
#   lost     jobs in `produced` never applied       doubled  jobs applied more than once
#   dlq      dead letters (none is expected)        counters every counter equals its jobs
#   recovery s from the fault healed until a 1-second bin of completions reaches 90 % of
#            the clean rate; during / after: completions while the fault lasted / in the
#            AFTER_S seconds after it healed, as a percentage of the clean rate over as long
#            (after is above 100 % while the backlog drains)
#
# Campaigns (--campaigns, comma-separated; default all):
#   kill9       kill -9 of a random worker at random moments (20 times, --quick 6), 50-600 ms
#               apart, so that some land in a batch's COMMIT; it is restarted at once
#   pg_restart  pg_ctl stop -m immediate, 2 s down, start (3 times, --quick 1)
#   terminate   pg_terminate_backend of every worker backend (5 times, --quick 2)
#   sigstop     SIGSTOP of one worker for job_timeout (5s) + 5 s while the other runs, SIGCONT
#   partition   the workers reach the server through bench/chaos_proxy.cpp, which stops
#               forwarding (sockets stay open) for PARTITION_S (20 s, --quick 12: beyond
#               job_timeout 5s, the lease 3s, idle_in_transaction_session_timeout 6s), then heals
#   exhaustion  every free connection slot taken by other sessions, the workers' backends
#               terminated, and every slot they free taken again at once for 10 s (they
#               must reconnect and cannot), then the slots released
#   pgbouncer   the workers go through PgBouncer (transaction mode, prepared_statements off,
#               LISTEN direct, pool 20 >= what they need); it is killed -9 and restarted 3 s later
#   readonly    ALTER SYSTEM SET default_transaction_read_only = on + reload for 10 s, then off
#   wal_full    pg_wal moved to a 256 MB tmpfs (mount -t tmpfs), filled up by a ballast file
#               until the server fails a WAL write (PANIC) and 10 s more, then the ballast
#               removed; the server is started again if it stayed down
#   failover    tests/failover.sh: a streaming standby (pg_basebackup -R) promoted after the
#               primary is killed, synchronous and asynchronous replication (its own clusters)
#   kill_loop   the workers' handlers take 20 ms (16 threads each on the transaction queue,
#               batches of 5);
#               one worker is SIGKILLed every KILL_EVERY_S (20 s, --quick 10), KILLS times (3,
#               --quick 2), alternately, and restarted: the survivors' pickup (enqueue -> the
#               handler's start) is measured on the jobs enqueued after each kill. Reported:
#               its p99 in the second half of the clean period (the first is the workers'
#               warm-up) and while the kills go on, and the recovery:
#               how long after a kill the p99 of 250 ms bins stays above 2x the clean p99
#               (the worst kill of the run). One counter key per job, LEASE_RATE 20 (the
#               lease queue's sql handler sleeps in its settlement). Not in the default list.
#
# Options: --quick, --campaigns LIST. Environment: RATE (600), LEASE_RATE (150), WORKERS (2),
# KILL_EVERY_S and KILLS (kill_loop),
# CLEAN_S (10, --quick 8), AFTER_S (10), PARTITION_S, CHAOS_OUT (bench/results/chaos.json),
# BENCH_BUILD_DIR (build-bench; when it already holds oncely and oncely_chaos_proxy, nothing
# is rebuilt). Prints the table (Markdown) on stdout and writes the rows as JSON. Needs root
# (the server runs as postgres; the tmpfs mount) and pgbouncer for its campaign.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

QUICK=0
CAMPAIGNS=kill9,pg_restart,terminate,sigstop,partition,exhaustion,pgbouncer,readonly,wal_full,failover
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --campaigns) CAMPAIGNS=${2:?--campaigns needs a list}; shift ;;
    --campaigns=*) CAMPAIGNS=${1#*=} ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; /^set -euo/d'; exit 0 ;;
    *) echo "chaos: unknown option $1 (--quick, --campaigns LIST)" >&2; exit 2 ;;
  esac
  shift
done
RATE=${RATE:-600}
LEASE_RATE=${LEASE_RATE:-150}
WORKERS=${WORKERS:-2}
CLEAN_S=${CLEAN_S:-$([ $QUICK = 1 ] && echo 8 || echo 10)}
AFTER_S=${AFTER_S:-10}
PARTITION_S=${PARTITION_S:-$([ $QUICK = 1 ] && echo 12 || echo 20)}
OUT=${CHAOS_OUT:-$ROOT/bench/results/chaos.json}
reps() { if [ $QUICK = 1 ]; then echo "$2"; else echo "$1"; fi; }
QUICK_FLAG=""
[ $QUICK = 0 ] || QUICK_FLAG=" --quick"
COMMAND="bash bench/chaos.sh$QUICK_FLAG --campaigns $CAMPAIGNS (RATE=$RATE LEASE_RATE=$LEASE_RATE WORKERS=$WORKERS CLEAN_S=$CLEAN_S AFTER_S=$AFTER_S)"
PROXY="$BUILD_DIR/bench/oncely_chaos_proxy"
SCHEMA=chaos

[ "$(id -u)" = 0 ] || { echo "chaos: run as root (the server runs as postgres; wal_full mounts a tmpfs)" >&2; exit 1; }
"$ROOT/scripts/deps.sh"  # jq and pgbouncer too
if [ ! -x "$ONCELY" ] || [ ! -x "$PROXY" ]; then
  say "building (Release) in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DONCELY_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target oncely_cli oncely_chaos_proxy >/dev/null
fi

WORK=$(mktemp -d /tmp/oncely-chaos.XXXXXX)
chmod 755 "$WORK"
PGDIR="$WORK/pg"
BG=()  # background processes of this script: stopped on exit
cleanup() {
  set +e
  touch "$WORK/stop" "$WORK/produce_stop"
  for pid in "${BG[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for f in "$WORK"/worker*.pid "$WORK"/pgbouncer.pid "$WORK"/proxy.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  pg_stop
  mountpoint -q "$WORK/waltmp" 2>/dev/null && umount "$WORK/waltmp"
  "$ROOT/scripts/local-pg.sh" stop "$PGDIR" >/dev/null 2>&1
  [ "${CHAOS_KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

as_pg() { runuser -u postgres -- "$@"; }
now() { date +%s.%N; }
pg_stop() { [ -f "$PGDIR/data/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -m "${1:-fast}" -w -t 60 stop >/dev/null 2>&1; true; }
pg_start() { as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/postgres.log" -w -t 120 start >/dev/null; }
pg_up() { psql_ "$URL" -c "SELECT 1" >/dev/null 2>&1; }
# wait_for SECONDS COMMAND...: until COMMAND succeeds; false when the time is up.
wait_for() {
  local limit=$1 start=$SECONDS
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - start < limit)) || return 1
    sleep 0.2
  done
}

# ---- the cluster -------------------------------------------------------------------------

URL=$("$ROOT/scripts/local-pg.sh" start "$PGDIR")
PORT=$(cat "$PGDIR/port")
# Fewer slots than local-pg.sh's 300, so that the exhaustion campaign can take them all;
# frequent checkpoints, so that WAL stays small enough for the tmpfs of wal_full.
psql_ "$URL" -c "ALTER SYSTEM SET max_connections = 120" -c "ALTER SYSTEM SET max_wal_size = '96MB'" \
  -c "ALTER SYSTEM SET min_wal_size = '32MB'" -c "ALTER SYSTEM SET checkpoint_timeout = '30s'"
pg_stop && pg_start
say "PostgreSQL at $URL (data in $PGDIR)"

# ---- one campaign's pieces ---------------------------------------------------------------

# The schema, the workload's tables, and the worker file ($1: extra top-level JSON).
# HANDLER_MS (0): how long each job's handler sleeps first; TX_CONCURRENCY (2) and TX_BATCH
# (100): the transaction queue's threads per worker and its batch_size. Each run records its pickup: from the producer's
# INSERT (the payload's enq) to the start of the handler's statement.
setup_schema() {
  local sleep=""
  [ "${HANDLER_MS:-0}" = 0 ] || sleep="FROM (SELECT pg_sleep(${HANDLER_MS} / 1000.0)) AS s"
  psql_ "$URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
  DATABASE_URL=$URL ONCELY_SCHEMA=$SCHEMA "$ONCELY" migrate >/dev/null
  psql_ "$URL" -c "CREATE TABLE $SCHEMA.counters (key text PRIMARY KEY, n bigint NOT NULL)" \
    -c "CREATE TABLE $SCHEMA.applied (idem text NOT NULL, queue text NOT NULL, at timestamptz NOT NULL,
                                      enq float8, pickup_ms float8)" \
    -c "CREATE TABLE $SCHEMA.produced (idem text PRIMARY KEY, queue text NOT NULL, key text NOT NULL)" \
    -c "CREATE INDEX ON $SCHEMA.applied (queue, at)"
  cat >"$WORK/worker.json" <<JSON
{"shutdown_grace": "5s", ${1:-}
 "queues": {"tx": {"concurrency": ${TX_CONCURRENCY:-2}, "batch_size": ${TX_BATCH:-100}, "poll_interval": "200ms", "job_timeout": "5s"},
            "lease": {"mode": "lease", "lease": "3s", "concurrency": 32, "batch_size": 100, "poll_interval": "200ms",
                      "job_timeout": "5s"}},
 "handlers": {"count": {"type": "sql", "params": ["/key", "/idem", "/queue", "/enq"],
   "statement": "WITH a AS (INSERT INTO $SCHEMA.applied (idem, queue, at, enq, pickup_ms) SELECT \$2, \$3, clock_timestamp(), \$4::float8, (extract(epoch FROM statement_timestamp()) - \$4::float8) * 1000 $sleep) INSERT INTO $SCHEMA.counters (key, n) VALUES (\$1, 1) ON CONFLICT (key) DO UPDATE SET n = counters.n + 1"}}}
JSON
}

# RATE jobs/s into each queue, in ticks of 100 ms; a tick whose INSERT fails is tried again
# (ON CONFLICT: a retry after an INSERT that did commit adds nothing); a backlog after a
# fault goes in at most 2,000 per queue and tick.
# RATE jobs/s into the transaction queue and LEASE_RATE into the lease queue, in ticks of
# 100 ms; a tick whose INSERT fails is tried again (ON CONFLICT: a retry after an INSERT
# that did commit adds nothing); a backlog after a fault goes in at most 2,000 per tick.
# Each counter key takes KEY_RUN (20) jobs in a row, over KEYS (500) keys: a worker's batches
# contend for the counters' row locks, as real work on hot rows does (kill_loop: one key
# per job, so that its pickups measure the workers and not the counters' locks).
produce_sql() {
  echo "WITH p AS (INSERT INTO $SCHEMA.produced (idem, queue, key)
  SELECT q || '-' || i, q, q || '-' || (i / ${KEY_RUN:-20} % ${KEYS:-500}) FROM (VALUES ('tx', :ta::bigint, :tb::bigint), ('lease', :la::bigint, :lb::bigint)) AS v (q, a, b),
       generate_series(a, b) AS i
  ON CONFLICT DO NOTHING RETURNING idem, queue, key)
INSERT INTO $SCHEMA.jobs (queue, kind, idempotency_key, payload)
SELECT queue, 'count', idem,
       jsonb_build_object('key', key, 'idem', idem, 'queue', queue, 'enq', extract(epoch FROM clock_timestamp())) FROM p"
}
producer() {
  local start t=0 l=0 elapsed tdue ldue tb lb
  start=$(now)
  while [ ! -f "$WORK/produce_stop" ]; do
    elapsed=$(awk -v s="$start" -v e="$(now)" 'BEGIN { printf "%.3f", e - s }')
    tdue=$(awk -v e="$elapsed" -v r="$RATE" 'BEGIN { printf "%d", e * r }')
    ldue=$(awk -v e="$elapsed" -v r="$LEASE_RATE" 'BEGIN { printf "%d", e * r }')
    tb=$((tdue < t + 2000 ? tdue : t + 2000))
    lb=$((ldue < l + 2000 ? ldue : l + 2000))
    if ((tb > t || lb > l)); then
      if PGAPPNAME=chaos_producer PGCONNECT_TIMEOUT=3 PGOPTIONS="-c statement_timeout=5000" \
        psql -XAtq -v ON_ERROR_STOP=1 -v ta=$((t + 1)) -v tb="$tb" -v la=$((l + 1)) -v lb="$lb" "$URL" \
        >/dev/null 2>>"$WORK/producer.log" <<<"$(produce_sql)"; then
        t=$tb l=$lb
      fi
    fi
    sleep 0.1
  done
}

# Worker slot $1, restarted 0.2 s after it exits until $WORK/stop exists. Env: WORKER_URL,
# and WORKER_ENV (extra NAME=VALUE words).
worker_slot() {
  local slot=$1
  while [ ! -f "$WORK/stop" ]; do
    # shellcheck disable=SC2086  # WORKER_ENV: words on purpose
    env PGAPPNAME=chaos_worker DATABASE_URL="$WORKER_URL" ONCELY_SCHEMA=$SCHEMA ${WORKER_ENV:-} \
      "$ONCELY" worker --config "$WORK/worker.json" >>"$WORK/worker$slot.log" 2>&1 &
    echo $! >"$WORK/worker$slot.pid"
    wait $! || true
    [ -f "$WORK/stop" ] || { echo restart >>"$WORK/restarts"; sleep 0.2; }
  done
}
worker_pid() { cat "$WORK/worker$1.pid"; }

start_run() {
  PGLOG_FROM=$(wc -l <"$PGDIR/postgres.log")
  rm -f "$WORK/stop" "$WORK/produce_stop" "$WORK/restarts" "$WORK"/worker*.log "$WORK/producer.log" "$WORK/kills"
  local i
  for ((i = 1; i <= WORKERS; i++)); do
    worker_slot "$i" &
    BG+=($!)
  done
  producer &
  PRODUCER=$!
  BG+=("$PRODUCER")
  T_START=$(now)
  sleep "$CLEAN_S"
  T_FAULT=$(now)
}

# The fault has healed: AFTER_S more seconds, then stop producing, drain, stop the workers.
finish_run() {
  T_HEAL=$(now)
  sleep "$AFTER_S"
  touch "$WORK/produce_stop"
  wait "$PRODUCER" || true
  pg_up || pg_start || true
  wait_for 120 drained || say "$CAMPAIGN: the queues did not drain in 120 s"
  touch "$WORK/stop"
  local i
  for ((i = 1; i <= WORKERS; i++)); do kill -TERM "$(worker_pid "$i")" 2>/dev/null || true; done
  wait_for 30 workers_gone || say "$CAMPAIGN: workers still running 30 s after SIGTERM"
}
drained() { [ "$(psql_ "$URL" -c "SELECT count(*) FROM $SCHEMA.jobs")" = 0 ]; }
workers_gone() {
  local i
  for ((i = 1; i <= WORKERS; i++)); do ! kill -0 "$(worker_pid "$i")" 2>/dev/null || return 1; done
}

# What the logs say the fault did (so that a campaign whose fault missed shows): the
# workers' lines about lost connections, a read-only server, refused connections, and the
# server's PANICs. Logs of each campaign are kept in $WORK/logs/CAMPAIGN (CHAOS_KEEP=1).
evidence() {
  local logs="$WORK/logs/$CAMPAIGN"
  mkdir -p "$logs"
  cp "$WORK"/worker*.log "$logs/" 2>/dev/null || true
  tail -n +"$((PGLOG_FROM + 1))" "$PGDIR/postgres.log" >"$logs/postgres.log" 2>/dev/null || true
  local reconnects readonly refused panics
  reconnects=$(cat "$logs"/worker*.log | grep -c "reconnecting" || true)
  readonly=$(cat "$logs"/worker*.log | grep -c "read-only" || true)
  refused=$(cat "$logs"/worker*.log | grep -c -E "too many clients|remaining connection slots" || true)
  panics=$(grep -c "PANIC" "$logs/postgres.log" 2>/dev/null || true)
  echo "worker log: $reconnects reconnecting, $readonly read-only, $refused connections refused; server log: ${panics:-0} PANIC"
}

# One row per mode, as JSON, from the database alone.
RESULTS=()
verify() {
  local queue mode row restarts
  restarts=0
  [ ! -f "$WORK/restarts" ] || restarts=$(wc -l <"$WORK/restarts")
  for queue in tx lease; do
    mode=$([ $queue = tx ] && echo transaction || echo lease)
    row=$(psql_ "$URL" -c "
      WITH p AS (SELECT * FROM $SCHEMA.produced WHERE queue = '$queue'),
           a AS (SELECT * FROM $SCHEMA.applied WHERE queue = '$queue'),
           runs AS (SELECT idem, count(*) AS n FROM a GROUP BY idem),
           per_key AS (SELECT key, count(*) AS n FROM p GROUP BY key),
           clean AS (SELECT count(*) / greatest($T_FAULT - $T_START - 2, 1) AS rate FROM a
                      WHERE at >= to_timestamp($T_START + 2) AND at < to_timestamp($T_FAULT)),
           bins AS (SELECT s, (SELECT count(*) FROM a WHERE at >= to_timestamp($T_HEAL + s) AND at < to_timestamp($T_HEAL + s + 1)) AS n
                      FROM generate_series(0, 180) AS s)
      SELECT json_build_object(
        'campaign', '$CAMPAIGN', 'mode', '$mode', 'detail', '$DETAIL',
        'jobs', (SELECT count(*) FROM p),
        'lost', (SELECT count(*) FROM p WHERE NOT EXISTS (SELECT FROM runs WHERE runs.idem = p.idem)),
        'doubled', (SELECT count(*) FROM runs WHERE n > 1),
        'dead_letters', (SELECT count(*) FROM $SCHEMA.dead_letters WHERE queue = '$queue'),
        'counters_exact', NOT EXISTS (SELECT FROM per_key k LEFT JOIN $SCHEMA.counters c USING (key) WHERE c.n IS DISTINCT FROM k.n),
        'clean_jobs_per_s', round((SELECT rate FROM clean)::numeric, 1),
        'recovery_s', (SELECT min(s) FROM bins WHERE n >= 0.9 * (SELECT rate FROM clean)),
        'during_pct', round(100 * (SELECT count(*) FROM a WHERE at >= to_timestamp($T_FAULT) AND at < to_timestamp($T_HEAL))
                         / nullif((SELECT rate FROM clean) * ($T_HEAL - $T_FAULT), 0)),
        'after_pct', round(100 * (SELECT count(*) FROM a WHERE at >= to_timestamp($T_HEAL) AND at < to_timestamp($T_HEAL + $AFTER_S))
                         / nullif((SELECT rate FROM clean) * $AFTER_S, 0)),
        'fault_s', round(($T_HEAL - $T_FAULT)::numeric, 1),
        'pickup_p99_clean_ms', (SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY pickup_ms)::numeric, 1) FROM a
                                 WHERE enq >= $T_START + $CLEAN_S / 2.0 AND enq < $T_FAULT),
        'pickup_p99_during_ms', (SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY pickup_ms)::numeric, 1) FROM a
                                  WHERE enq >= $T_FAULT AND enq < $T_HEAL),
        'kill_recovery_s', $(kill_recovery_sql),
        'worker_restarts', $restarts, 'evidence', '$(evidence)')")
    RESULTS+=("$row")
    say "$row"
  done
}

# The kill loop's recovery, in SQL over `a` (one queue's runs): for each kill in
# $WORK/kills, the jobs enqueued in the KILL_EVERY_S after it in 250 ms bins; its recovery
# is the end of the last bin whose pickup p99 is above twice the clean p99 (0 when none
# is); the worst kill's. NULL without kills.
kill_recovery_sql() {
  if [ ! -s "$WORK/kills" ]; then echo "NULL"; return; fi
  local kills
  kills=$(paste -sd, "$WORK/kills")
  echo "(WITH clean AS (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY pickup_ms) AS p99 FROM a
                         WHERE enq >= $T_START + $CLEAN_S / 2.0 AND enq < $T_FAULT),
              bins AS (SELECT k, b, percentile_cont(0.99) WITHIN GROUP (ORDER BY a.pickup_ms) AS p99
                         FROM unnest(ARRAY[$kills]::float8[]) AS k, generate_series(0, ${KILL_EVERY_S:-20} * 4 - 1) AS b, a
                        WHERE a.enq >= k + b * 0.25 AND a.enq < k + (b + 1) * 0.25
                        GROUP BY k, b)
         SELECT max(coalesce((SELECT (max(b) + 1) * 0.25 FROM bins WHERE bins.k = kills.k AND bins.p99 > 2 * (SELECT p99 FROM clean)), 0))
           FROM unnest(ARRAY[$kills]::float8[]) AS kills(k))"
}

# ---- the campaigns -----------------------------------------------------------------------

campaign_kill_loop() {
  local n i slot
  n=${KILLS:-$(reps 3 2)}
  KILL_EVERY_S=${KILL_EVERY_S:-$(reps 20 10)}
  DETAIL="SIGKILL of one worker every ${KILL_EVERY_S} s x$n, 20 ms handlers"
  # Batches of 5: a job waits for the ones before it in its batch (100 ms at most here).
  HANDLER_MS=20 TX_CONCURRENCY=16 TX_BATCH=5 setup_schema
  # The lease queue's sql handler runs in its settlement, one at a time per connection: 20
  # jobs/s keep it below what one worker serves.
  KEY_RUN=1 KEYS=1000000000 LEASE_RATE=20 start_run
  for ((i = 0; i < n; i++)); do
    slot=$((i % WORKERS + 1))
    now >>"$WORK/kills"
    kill -9 "$(worker_pid "$slot")" 2>/dev/null || true
    sleep "$KILL_EVERY_S"
  done
  finish_run
}

campaign_kill9() {
  local n i slot
  n=$(reps 20 6)
  DETAIL="kill -9 of a random worker x$n"
  setup_schema
  start_run
  for ((i = 0; i < n; i++)); do
    slot=$((RANDOM % WORKERS + 1))
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.05 + 0.55 * r / 32767 }')"
    kill -9 "$(worker_pid "$slot")" 2>/dev/null || true
    sleep 0.3  # restarted after 0.2 s
  done
  finish_run
}

campaign_pg_restart() {
  local n i
  n=$(reps 3 1)
  DETAIL="pg_ctl stop -m immediate; 2 s down; start x$n"
  setup_schema
  start_run
  for ((i = 0; i < n; i++)); do
    pg_stop immediate
    sleep 2
    pg_start
    ((i == n - 1)) || sleep 5
  done
  finish_run
}

TERMINATE_SQL="SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE application_name = 'chaos_worker' AND pid <> pg_backend_pid()"
campaign_terminate() {
  local n i
  n=$(reps 5 2)
  DETAIL="pg_terminate_backend of every worker backend x$n"
  setup_schema
  start_run
  for ((i = 0; i < n; i++)); do
    say "terminated $(psql_ "$URL" -c "$TERMINATE_SQL") worker backends"
    ((i == n - 1)) || sleep 3
  done
  finish_run
}

campaign_sigstop() {
  DETAIL="SIGSTOP of 1 of $WORKERS workers for 10 s (job_timeout 5s, lease 3s)"
  setup_schema
  start_run
  local pid
  pid=$(worker_pid 1)
  kill -STOP "$pid"
  sleep 10
  kill -CONT "$pid"
  finish_run
}

campaign_partition() {
  DETAIL="network partition ${PARTITION_S} s through the proxy (sockets open); healed"
  "$PROXY" --target "127.0.0.1:$PORT" --port-file "$WORK/proxy.port" >/dev/null 2>>"$WORK/proxy.log" &
  echo $! >"$WORK/proxy.pid"
  BG+=($!)
  wait_for 10 test -s "$WORK/proxy.port"
  setup_schema
  WORKER_URL="postgresql://postgres@127.0.0.1:$(cat "$WORK/proxy.port")/postgres" start_run
  kill -USR1 "$(cat "$WORK/proxy.pid")"
  sleep "$PARTITION_S"
  kill -USR2 "$(cat "$WORK/proxy.pid")"
  finish_run
  kill -TERM "$(cat "$WORK/proxy.pid")"
  rm -f "$WORK/proxy.pid"
}

campaign_exhaustion() {
  DETAIL="max_connections reached by other sessions for 10 s; worker backends terminated"
  setup_schema
  start_run
  # An admin session opened first (the last slot may be gone when it is needed); then
  # sessions that sleep until released, until the server refuses more (superuser slots
  # included: every session here is the postgres superuser).
  mkfifo "$WORK/admin.fifo"
  PGAPPNAME=chaos_admin psql -XAtq "$URL" <"$WORK/admin.fifo" >>"$WORK/admin.log" 2>&1 &
  exec 7>"$WORK/admin.fifo"
  echo "SELECT 'admin ready';" >&7
  local held=0
  while ((held < 200)); do
    PGAPPNAME=chaos_hog psql -XAtq "$URL" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
    held=$((held + 1))
    if ((held % 5 == 0)); then
      sleep 0.3
      psql_ "$URL" -c "SELECT 1" >/dev/null 2>&1 || break
    fi
  done
  say "about $held sessions started; the server refuses more"
  echo "$TERMINATE_SQL;" >&7
  # For 10 s, every slot the terminated backends free is taken again at once.
  local until=$((SECONDS + 10))
  while ((SECONDS < until)); do
    for _ in 1 2 3 4 5; do
      PGAPPNAME=chaos_hog psql -XAtq "$URL" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
    done
    sleep 0.1
  done
  # Released: the sleeping backends ended (the server would not notice their clients go).
  echo "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'chaos_hog';" >&7
  exec 7>&-
  rm -f "$WORK/admin.fifo"
  finish_run
}

campaign_pgbouncer() {
  command -v pgbouncer >/dev/null || { say "pgbouncer not installed: skipped"; return 0; }
  DETAIL="PgBouncer 1.18 (transaction mode) killed -9; restarted 3 s later"
  local bport=$((PORT + 100)) dir="$WORK/pgbouncer"
  mkdir -p "$dir" && chown postgres "$dir"
  echo '"postgres" ""' >"$dir/userlist.txt"
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
postgres = host=127.0.0.1 port=$PORT dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 400
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  chown -R postgres "$dir"
  bouncer() { as_pg pgbouncer -d "$dir/pgbouncer.ini" && wait_for 10 test -s "$dir/pgbouncer.pid"; }
  bouncer
  setup_schema '"prepared_statements": false,'
  WORKER_URL="postgresql://postgres@127.0.0.1:$bport/postgres" WORKER_ENV="ONCELY_LISTEN_DATABASE_URL=$URL" start_run
  kill -9 "$(cat "$dir/pgbouncer.pid")"
  rm -f "$dir/pgbouncer.pid"
  sleep 3
  bouncer
  finish_run
  kill -TERM "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
}

campaign_readonly() {
  DETAIL="default_transaction_read_only = on (reload) for 10 s"
  setup_schema
  start_run
  psql_ "$URL" -c "ALTER SYSTEM SET default_transaction_read_only = on" -c "SELECT pg_reload_conf()" >/dev/null
  sleep 10
  psql_ "$URL" -c "SET default_transaction_read_only = off" -c "ALTER SYSTEM RESET default_transaction_read_only" \
    -c "SELECT pg_reload_conf()" >/dev/null
  finish_run
}

campaign_wal_full() {
  DETAIL="pg_wal on a 256 MB tmpfs full until a WAL write fails and 10 s more; then freed"
  local wal="$WORK/waltmp" restarted=0
  # pg_wal onto a small tmpfs of its own (a symlink, as initdb --waldir makes).
  pg_stop
  mkdir -p "$wal"
  mount -t tmpfs -o size=256m,mode=700 tmpfs "$wal"
  chown postgres:postgres "$wal"
  cp -a "$PGDIR/data/pg_wal/." "$wal/"
  mv "$PGDIR/data/pg_wal" "$PGDIR/data/pg_wal.disk"
  ln -s "$wal" "$PGDIR/data/pg_wal"
  pg_start
  setup_schema
  start_run
  # Fill it: the ballast takes all but 1 MB. The server writes into the segments it has
  # already (recycled ones too) until it needs a new one, so the fault bites only once
  # those are used up: the disk stays full until the server has failed a WAL write
  # (a PANIC in its log), and 10 s more.
  local log_from full_until
  log_from=$(wc -l <"$PGDIR/postgres.log")
  dd if=/dev/zero of="$wal/ballast" bs=1M count=$(($(df -m --output=avail "$wal" | tail -1) - 1)) status=none 2>/dev/null || true
  wal_write_failed() { tail -n +"$((log_from + 1))" "$PGDIR/postgres.log" | grep -q "No space left on device"; }
  wait_for 90 wal_write_failed || say "wal_full: no WAL write failed in 90 s"
  full_until=$((SECONDS + 10))
  while ((SECONDS < full_until)); do sleep 0.5; done
  rm -f "$wal/ballast"
  # The server PANICs when a WAL write fails; the postmaster restarts it, or, if recovery
  # itself ran out of space, stops: then it is started again, as an operator would.
  if ! wait_for 10 pg_up; then
    pg_stop immediate
    pg_start && restarted=1
  fi
  if [ $restarted = 1 ]; then DETAIL+="; server started again by the script"; fi
  finish_run
  pg_stop
  rm -f "$PGDIR/data/pg_wal"
  mkdir "$PGDIR/data/pg_wal" && chown postgres:postgres "$PGDIR/data/pg_wal" && chmod 700 "$PGDIR/data/pg_wal"
  cp -a "$wal/." "$PGDIR/data/pg_wal/"
  rm -rf "$PGDIR/data/pg_wal.disk"
  umount "$wal"
  pg_start
}

campaign_failover() {
  local line
  while read -r line; do
    [[ $line == "{"* ]] || continue
    RESULTS+=("$(sed 's/^{/{"campaign":"failover",/' <<<"$line")")
    say "$line"
  done < <(FAILOVER_JOBS=$(reps 4800 2400) bash "$ROOT/tests/failover.sh" "$ONCELY" sync async demoted)
}

# ---- the run -----------------------------------------------------------------------------

WORKER_URL=$URL
T0=$SECONDS
for CAMPAIGN in ${CAMPAIGNS//,/ }; do
  declare -F "campaign_$CAMPAIGN" >/dev/null || { echo "chaos: unknown campaign $CAMPAIGN" >&2; exit 2; }
done
for CAMPAIGN in ${CAMPAIGNS//,/ }; do
  say "campaign $CAMPAIGN"
  WORKER_URL=$URL WORKER_ENV=""
  DETAIL=""
  "campaign_$CAMPAIGN"
  [ "$CAMPAIGN" = failover ] || verify
done
TOTAL_S=$((SECONDS - T0))

# ---- the table -----------------------------------------------------------------------------

mkdir -p "$(dirname "$OUT")"
{
  echo "{\"oncely\": \"$(git -C "$ROOT" describe --always --dirty)\", \"machine\": \"$(machine_line)\","
  echo " \"command\": \"$COMMAND\", \"total_s\": $TOTAL_S,"
  echo " \"rows\": ["
  for i in "${!RESULTS[@]}"; do echo "  ${RESULTS[$i]}$([ "$i" -lt $((${#RESULTS[@]} - 1)) ] && echo ,)"; done
  echo "]}"
} >"$OUT"

get() { jq -r --arg k "$1" '.[$k] // "—"' <<<"$2"; }
echo
echo "oncely $(git -C "$ROOT" describe --always --dirty) on $(machine_line); PostgreSQL 15, TCP loopback"
echo "command: $COMMAND — total $((TOTAL_S / 60)) min $((TOTAL_S % 60)) s; JSON: ${OUT#"$ROOT"/}"
echo
echo "| campaign | mode | jobs | lost | doubled | unexpected DLQ | clean | recovery | during | after | pickup p99 clean / during | kill recovery |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for row in "${RESULTS[@]}"; do
  if [ "$(get campaign "$row")" = failover ]; then
    printf '| failover (%s replication%s) | both | %s | %s | %s | %s | — | first job on the new primary %s s after the fault | — | — |\n' \
      "$(get replication "$row")" "$([ "$(get scenario "$row")" = demoted ] && echo ", old primary left up read-only")" \
      "$(get jobs "$row")" "$(get lost "$row")" "$(get doubled "$row")" "$(get dead_letters "$row")" "$(get first_job_after_s "$row")"
    continue
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s/s | %s s | %s %% | %s %% | %s / %s ms | %s s |\n' "$(get detail "$row")" "$(get mode "$row")" \
    "$(get jobs "$row")" "$(get lost "$row")" "$(get doubled "$row")" "$(get dead_letters "$row")" "$(get clean_jobs_per_s "$row")" \
    "$(get recovery_s "$row")" "$(get during_pct "$row")" "$(get after_pct "$row")" \
    "$(get pickup_p99_clean_ms "$row")" "$(get pickup_p99_during_ms "$row")" "$(get kill_recovery_s "$row")"
done
echo
echo "recovery: from the fault healed until completions reach 90 % of the clean rate (1-second bins);"
echo "during / after: completions while the fault lasted / in the ${AFTER_S} s after, as % of the clean rate."
