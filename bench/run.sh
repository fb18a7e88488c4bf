#!/usr/bin/env bash
# oncely's benchmarks, side by side with graphile-worker and pg-boss, in one command:
#
#   bash bench/run.sh
#   RUNS=5 JOBS=20000 bash bench/run.sh      # more runs
#   PEERS=0 bash bench/run.sh                # oncely only (DATABASE_URL, or a throwaway Postgres)
#
# 1. Builds oncely in Release (build-bench/).
# 2. Installs the peers for bench/peers/ (graphile-worker and pg-boss at the versions pinned in
#    bench/peers/package-lock.json, with the Node 22 they need) by `npm ci` into
#    build-bench/peers (PEERS_CACHE), once; PEERS=0 measures oncely only, PEERS=1 fails when
#    they cannot be installed (PEERS=auto, the default, goes on without them).
# 3. Uses DATABASE_URL, or starts a throwaway PostgreSQL 15 (scripts/local-pg.sh,
#    ONCELY_PG_PROFILE=bench: fsync, synchronous_commit and full_page_writes on;
#    shared_buffers 1GB, max_wal_size 8GB, autovacuum_naptime 10s); oncely and the peers run
#    against that one server (each peer run in a database of its own, created and dropped).
# 4. Runs every measurement RUNS times, interleaved (pass 1 runs each once, then pass 2, ...),
#    each after a quiet gate: it waits (up to QUIET_MAX_WAIT_S, 180 s) until the machine's
#    other workloads use less than QUIET_MAX_CORES (0.15) cores.
# 5. Prints one Markdown table of medians, with oncely/peer ratios, on stdout.
#
# bench/peers/crosscheck.sh compares bench/peers/ with another harness measuring the same.
#
# The lease-mode burn-down runs the same JOBS no-op jobs on a lease queue (lease 30s,
# LEASE_CONCURRENCY 500 handler threads, LEASE_BATCH 500 jobs per claim, LEASE_CONNECTIONS 2).
# Two references that are not peers: the stand-in (pgbench on one connection: claim + dedup
# marker + delete of 500 keyed jobs per transaction, oncely's design with nothing of its
# own), a ceiling for the burn-downs on this server; and pgbench's INSERT into oncely's own
# jobs table, with its INSERT trigger and without, beside the plain-table INSERT.
# SCENARIOS="burn latency" measures only those groups of rows (burn big increment latency
# single bulk adverse; default all).
# The adverse cells (oncely at its defaults; graphile-worker at its best configuration where
# its harness can run the cell): SLOW_JOBS (20000) jobs whose handler waits 1 ms and
# SLOW10_JOBS (4000) waiting 10 ms; JOBS no-op jobs with RTT_MS (1) of round trip added by
# bench/chaos_proxy.cpp on loopback (this kernel has no netem); BIG_JOBS no-op jobs while a
# REPEATABLE READ reader holds its snapshot open for the whole run; DUE_JOBS (100000) jobs
# due beside SCHEDULED_JOBS (900000) scheduled an hour ahead (oncely only: the peers'
# harness counts every row as pending); QUEUES (50) queues of QUEUE_JOBS (20) jobs each, one
# thread per queue (oncely only: graphile-worker serves every task from one pool).
# Sizes: JOBS (20000: burn-downs, single enqueue), BIG_JOBS (100000: the long burn-down),
# BULK_JOBS (200000: bulk enqueue), PROCESS_JOBS (300: one `oncely enqueue` process per job),
# SAMPLES (200: latency), PGBENCH_SECS (10: the pgbench reference).
# Everything it starts is stopped, and everything it creates dropped, on exit.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

RUNS=${RUNS:-3}
JOBS=${JOBS:-20000}
BIG_JOBS=${BIG_JOBS:-100000}
BULK_JOBS=${BULK_JOBS:-200000}
PROCESS_JOBS=${PROCESS_JOBS:-300}
SAMPLES=${SAMPLES:-200}
PGBENCH_SECS=${PGBENCH_SECS:-10}
PEERS=${PEERS:-auto}
SLOW_JOBS=${SLOW_JOBS:-20000}
SLOW10_JOBS=${SLOW10_JOBS:-4000}
RTT_MS=${RTT_MS:-1}
DUE_JOBS=${DUE_JOBS:-100000}
SCHEDULED_JOBS=${SCHEDULED_JOBS:-900000}
QUEUES=${QUEUES:-50}
QUEUE_JOBS=${QUEUE_JOBS:-20}
LEASE_CONCURRENCY=${LEASE_CONCURRENCY:-500}  # the lease-mode burn-down's queue (lease 30s)
LEASE_BATCH=${LEASE_BATCH:-500}
LEASE_CONNECTIONS=${LEASE_CONNECTIONS:-2}
# SCENARIOS: which groups of rows to measure (all, or some of: burn big increment latency
# single bulk adverse); "burn" is the two burn-downs of JOBS jobs and graphile-worker's.
SCENARIOS=${SCENARIOS:-all}
want() { [[ " $SCENARIOS " == *" all "* || " $SCENARIOS " == *" $1 "* ]]; }
# shellcheck source=bench/peers/peers.sh
source "$ROOT/bench/peers/peers.sh"
COMMAND="RUNS=$RUNS JOBS=$JOBS BIG_JOBS=$BIG_JOBS BULK_JOBS=$BULK_JOBS PROCESS_JOBS=$PROCESS_JOBS SAMPLES=$SAMPLES"
COMMAND+=" PGBENCH_SECS=$PGBENCH_SECS LEASE_CONCURRENCY=$LEASE_CONCURRENCY LEASE_BATCH=$LEASE_BATCH"
COMMAND+=" LEASE_CONNECTIONS=$LEASE_CONNECTIONS"
want adverse && COMMAND+=" SLOW_JOBS=$SLOW_JOBS SLOW10_JOBS=$SLOW10_JOBS RTT_MS=$RTT_MS DUE_JOBS=$DUE_JOBS SCHEDULED_JOBS=$SCHEDULED_JOBS QUEUES=$QUEUES QUEUE_JOBS=$QUEUE_JOBS"
[ "$SCENARIOS" = all ] || COMMAND+=" SCENARIOS='$SCENARIOS'"
COMMAND+=" PEERS=$PEERS bash bench/run.sh"

WORK=$(mktemp -d /tmp/oncely-bench.XXXXXX)
NODE=""          # set once the peers are installed
SCHEMAS=()       # schemas this script created with the CLI (oncely_bench drops its own)
PROXY_PID="" HOLDER_PID=""  # the delaying proxy, the snapshot holder (adverse cells)
# Named per process, so that two runs on one database (DATABASE_URL) leave each other alone.
single_schema=oncely_cli_single_$$ process_schema=oncely_cli_process_$$ bulk_schema=oncely_cli_bulk_$$
PGBENCH_SCHEMA=oncely_pgbench_$$
cleanup() {
  set +e
  for pid in "$PROXY_PID" "$HOLDER_PID"; do [ -z "$pid" ] || kill "$pid" 2>/dev/null; done
  if [ -n "${DATABASE_URL:-}" ]; then
    for schema in "${SCHEMAS[@]}" "$PGBENCH_SCHEMA"; do psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE"; done
  fi
  bench_cleanup_local_database
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the peers ---------------------------------------------------------------------------

peers_wanted() {
  case "$PEERS" in
    0 | no | off) return 1 ;;
    *) return 0 ;;
  esac
}

# ---- measurements -------------------------------------------------------------------------

declare -A V  # measurement.field -> the values of the runs so far, space-separated
add() { V[$1]="${V[$1]:-} $2"; }
keep() {  # keep KEY JSON FIELD...: adds each field of JSON to KEY.FIELD
  local key=$1 json=$2 f v
  shift 2
  for f; do
    v=$(field "$f" "$json")
    [ -n "$v" ] && add "$key.$f" "$v"
  done
  return 0
}
med() { [ -n "${V[$1]:-}" ] && median ${V[$1]}; }  # (word splitting intended)

quiet_gate() { bench_quiet_gate; }

# run_oncely KEY FIELDS -- oncely_bench ARGS...: one run, its fields kept under KEY.
run_oncely() {
  local key=$1 fields=$2 json
  shift 3
  quiet_gate
  say "pass $run/$RUNS: oncely_bench $*"
  json=$("$BENCH" "$@" --runs 1 2>>"$WORK/oncely.log") || { tail -5 "$WORK/oncely.log" >&2; exit 1; }
  keep "$key" "$json" $fields  # (word splitting intended)
}

# run_peer KEY FIELDS -- PEER SCENARIO ARGS...: one run of bench/peers/PEER.mjs, its fields
# kept under KEY. A failed peer run is reported and left out (its cells stay empty).
run_peer() {
  local key=$1 fields=$2 json
  shift 3
  [ -n "$NODE" ] || return 0
  quiet_gate
  say "pass $run/$RUNS: bench/peers/$1.mjs ${*:2}"
  if json=$(peer_run "$@" 2>>"$WORK/peers.log"); then
    keep "$key" "$json" $fields  # (word splitting intended)
  else
    say "peer run failed: bench/peers/$1.mjs ${*:2}"
    tail -5 "$WORK/peers.log" >&2
  fi
}

# A fresh schema for a CLI measurement.
cli_schema() {
  local schema=$1
  psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE"
  "$ONCELY" --schema "$schema" migrate >/dev/null
  SCHEMAS+=("$schema")
}

# timed KEY N CMD...: runs CMD (after the quiet gate) and keeps N / its wall time as KEY.jobs_per_s.
timed() {
  local key=$1 n=$2 start end
  shift 2
  quiet_gate
  say "pass $run/$RUNS: $key"
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  add "$key.jobs_per_s" "$(awk -v n="$n" -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", n / (e - s) }')"
}

enqueue_lines() { "$ONCELY" --schema "$1" enqueue - "${@:3}" <"$2" >/dev/null; }
enqueue_processes() {
  local i
  for ((i = 0; i < PROCESS_JOBS; i++)); do "$ONCELY" --schema "$1" enqueue noop "{\"id\": $i}" >/dev/null; done
}
expect_jobs() {  # expect_jobs SCHEMA N: the CLI really stored N jobs
  local n
  n=$(psql_ "$DATABASE_URL" -c "SELECT count(*) FROM $1.jobs")
  [ "$n" = "$2" ] || { echo "bench: $1 holds $n jobs, expected $2" >&2; exit 1; }
}

# pgbench's one-INSERT-per-transaction ceiling, 1 client, prepared statements, in a schema
# of its own: a queue-like table (bigserial key, jsonb payload, a timestamp) holding 10,000
# rows, vacuumed and checkpointed first, then one autocommit INSERT per transaction.
pgbench_reference() {
  local sql="$WORK/pgbench" out tps
  mkdir -p "$sql"
  cat >"$sql/setup_q.sql" <<'SQL'
CREATE TABLE q (id bigserial PRIMARY KEY, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO q (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, 10000) AS i;
VACUUM ANALYZE q;
CHECKPOINT;
SQL
  echo "INSERT INTO q (payload) VALUES ('{\"n\": 1}');" >"$sql/f_insert1.sql"
  quiet_gate
  say "pass $run/$RUNS: pgbench f_insert1.sql, 1 client, ${PGBENCH_SECS}s"
  psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $PGBENCH_SCHEMA CASCADE" -c "CREATE SCHEMA $PGBENCH_SCHEMA"
  PGOPTIONS="-c search_path=$PGBENCH_SCHEMA -c client_min_messages=warning" \
    psql -XAtq -v ON_ERROR_STOP=1 -f "$sql/setup_q.sql" "$DATABASE_URL" >/dev/null
  out=$(PGOPTIONS="-c search_path=$PGBENCH_SCHEMA" \
    "$PGBIN/pgbench" -n -M prepared -c 1 -j 1 -T "$PGBENCH_SECS" -f "$sql/f_insert1.sql" "$DATABASE_URL" 2>&1) \
    || { echo "$out" >&2; exit 1; }
  tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time).*/\1/p' <<<"$out")
  add pgbench.jobs_per_s "$tps"
  psql_ "$DATABASE_URL" -c "DROP SCHEMA $PGBENCH_SCHEMA CASCADE"
}

# The same pgbench INSERT on oncely's own jobs table, in a schema migrated by the CLI: with
# its INSERT trigger (the NOTIFY and the new-job check, one trigger since schema version 14),
# and with it disabled, so that what the table and what the trigger cost are seen apart.
pgbench_jobs_reference() {
  local schema=oncely_pgbench_jobs_$$ out tps
  echo "INSERT INTO jobs (kind, payload) VALUES ('noop', '{\"id\": 1}');" >"$WORK/f_insert_jobs.sql"
  for variant in triggers no_triggers; do
    cli_schema "$schema"
    [ "$variant" = triggers ] || psql_ "$DATABASE_URL" -c "ALTER TABLE $schema.jobs DISABLE TRIGGER USER"
    psql_ "$DATABASE_URL" -c "CHECKPOINT"
    quiet_gate
    say "pass $run/$RUNS: pgbench INSERT into oncely's jobs table ($variant), 1 client, ${PGBENCH_SECS}s"
    out=$(PGOPTIONS="-c search_path=$schema" \
      "$PGBIN/pgbench" -n -M prepared -c 1 -j 1 -T "$PGBENCH_SECS" -f "$WORK/f_insert_jobs.sql" "$DATABASE_URL" 2>&1) \
      || { echo "$out" >&2; exit 1; }
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time).*/\1/p' <<<"$out")
    add "pgbench_jobs_$variant.jobs_per_s" "$tps"
  done
}

# A stand-in of oncely's design with nothing of oncely's own: one pgbench connection runs
# claim (FOR UPDATE SKIP LOCKED) + dedup marker + delete of 500 keyed no-op jobs per
# transaction, one statement, until the N pre-inserted jobs are gone. A ceiling for the
# burn-down on this server (no handler, no attempt record, no outcome counts), not a peer.
standin_burn() {  # standin_burn KEY N
  local key=$1 n=$2 schema=oncely_standin_$$ out tps tx left
  tx=$(((n + 499) / 500))
  cat >"$WORK/standin.sql" <<'SQL'
WITH claimed AS (
  SELECT id, kind, idempotency_key FROM jobs
   WHERE queue = 'default' AND run_at <= now()
   ORDER BY priority, run_at, id LIMIT 500 FOR UPDATE SKIP LOCKED
), marked AS (
  INSERT INTO processed_jobs (kind, idempotency_key, job_id, queue)
  SELECT kind, idempotency_key, id, 'default' FROM claimed
  ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
)
DELETE FROM jobs WHERE id IN (SELECT id FROM claimed);
SQL
  cli_schema "$schema"
  psql_ "$DATABASE_URL" -c "INSERT INTO $schema.jobs (kind, idempotency_key, payload) SELECT 'noop', 'key-' || i, jsonb_build_object('account', i % 1000, 'cents', 1) FROM generate_series(1, $n) AS i" \
    -c "ANALYZE $schema.jobs" -c "CHECKPOINT"
  quiet_gate
  say "pass $run/$RUNS: stand-in burn-down of $n jobs (pgbench, 1 connection, 500 per transaction)"
  out=$(PGOPTIONS="-c search_path=$schema" \
    "$PGBIN/pgbench" -n -M prepared -c 1 -j 1 -t "$tx" -f "$WORK/standin.sql" "$DATABASE_URL" 2>&1) \
    || { echo "$out" >&2; exit 1; }
  left=$(psql_ "$DATABASE_URL" -c "SELECT count(*) FROM $schema.jobs")
  [ "$left" = 0 ] || { echo "bench: the stand-in left $left jobs" >&2; exit 1; }
  tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time).*/\1/p' <<<"$out")
  add "$key.jobs_per_s" "$(awk -v t="$tps" -v n="$n" -v x="$tx" 'BEGIN { printf "%.1f", t * n / x }')"
  psql_ "$DATABASE_URL" -c "DROP SCHEMA $schema CASCADE"
}

# proxy_start: bench/chaos_proxy.cpp between the worker and the server, adding RTT_MS of
# round trip (half each way); sets PROXY_URL, DATABASE_URL through it. Needs a URL with host:port.
proxy_start() {
  local re='^(postgres(ql)?://([^@/]*@)?)([^:/?@]+):([0-9]+)(/.*)?$' port_file="$WORK/proxy.port" i
  [[ $DATABASE_URL =~ $re ]] || { echo "bench: the round-trip cell needs DATABASE_URL as postgresql://[user@]host:port/db" >&2; exit 1; }
  rm -f "$port_file"
  "$BUILD_DIR/bench/oncely_chaos_proxy" --target "${BASH_REMATCH[4]}:${BASH_REMATCH[5]}" --listen 0 --port-file "$port_file" \
    --delay-ms "$(awk -v r="$RTT_MS" 'BEGIN { print r / 2 }')" >/dev/null &
  PROXY_PID=$!
  for ((i = 0; i < 100; i++)); do [ -s "$port_file" ] && break; sleep 0.1; done
  [ -s "$port_file" ] || { echo "bench: the delaying proxy did not start" >&2; exit 1; }
  PROXY_URL="${BASH_REMATCH[1]}127.0.0.1:$(cat "$port_file")${BASH_REMATCH[6]}"
}
proxy_stop() { kill "$PROXY_PID" && wait "$PROXY_PID" 2>/dev/null; PROXY_PID=""; }

# snapshot_hold / snapshot_release: a REPEATABLE READ transaction on DATABASE_URL's database
# that took its snapshot and sits idle in it (a report, pg_dump), so that vacuum can remove
# no tuple deleted meanwhile; checked to be holding back the horizon before going on.
snapshot_hold() {
  local line
  coproc HOLDER { psql -XAtq -v ON_ERROR_STOP=1 "$DATABASE_URL" 2>&1; }
  echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 'held:' || pg_backend_pid();" >&"${HOLDER[1]}"
  read -r -t 30 line <&"${HOLDER[0]}" || true
  [[ $line == held:* ]] || { echo "bench: the snapshot holder did not start: $line" >&2; exit 1; }
  [ "$(psql_ "$DATABASE_URL" -c "SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = ${line#held:}")" = t ] ||
    { echo "bench: the snapshot holder holds no xmin" >&2; exit 1; }
}
snapshot_release() {
  echo "COMMIT;" >&"${HOLDER[1]}"
  eval "exec ${HOLDER[1]}>&-"
  wait "$HOLDER_PID" 2>/dev/null
  HOLDER_PID=""
}

# ---- setup ----------------------------------------------------------------------------------

bench_build
if peers_wanted; then
  if peers_install; then
    NODE=$PEER_NODE
  elif [ "$PEERS" = auto ]; then
    say "the peers could not be installed: oncely only"
  else
    echo "bench: PEERS=$PEERS, but graphile-worker and pg-boss could not be installed" >&2
    exit 1
  fi
fi
bench_local_database

lines="$WORK/lines.jsonl"  # BULK_JOBS jobs as newline-delimited JSON, like the peers' payloads
awk -v n="$BULK_JOBS" 'BEGIN { for (i = 0; i < n; i++) printf "{\"kind\":\"noop\",\"payload\":{\"id\":%d}}\n", i }' >"$lines"
head -n "$JOBS" "$lines" >"$WORK/single.jsonl"

# ---- the runs, interleaved ----------------------------------------------------------------

for run in $(seq 1 "$RUNS"); do
  if want burn; then
    run_oncely burn "jobs_per_s worker_cpu_us_per_job concurrency batch" -- process --jobs "$JOBS"
    run_peer graphile.burn jobs_per_s -- graphile burn --config 2p-c24-lq500-cb0 --jobs "$JOBS"
    standin_burn standin.burn "$JOBS"
    run_oncely burn_lease "jobs_per_s worker_cpu_us_per_job concurrency batch" -- process --jobs "$JOBS" \
      --mode lease --lease-ms 30000 --concurrency "$LEASE_CONCURRENCY" --batch "$LEASE_BATCH" \
      --connections "$LEASE_CONNECTIONS"
  fi
  if want big; then
    run_oncely burn_big "jobs_per_s worker_cpu_us_per_job concurrency batch" -- process --jobs "$BIG_JOBS"
    run_peer graphile.burn_big jobs_per_s -- graphile burn --config 2p-c24-lq500-cb0 --jobs "$BIG_JOBS"
    standin_burn standin.burn_big "$BIG_JOBS"
  fi
  if want increment; then
    run_oncely increment "jobs_per_s worker_cpu_us_per_job concurrency batch" -- process --jobs "$JOBS" --handler increment
    run_peer pgboss.tx jobs_per_s -- pgboss burn --config b100-c4-burst-tx --jobs "$JOBS"
  fi

  if want latency; then
    run_oncely latency "p50_ms p99_ms" -- latency --samples "$SAMPLES"
    run_peer graphile.latency "p50_ms p99_ms" -- graphile latency --config c24-lq500-cb0 --samples "$SAMPLES" --think-ms 10
    run_peer pgboss.latency "p50_ms p99_ms" -- pgboss latency --config b1-c1-notify --samples "$SAMPLES" --think-ms 10
  fi

  if want single; then
    run_oncely client_single "jobs_per_s client_cpu_us_per_job" -- enqueue-single --jobs "$JOBS"
    cli_schema "$single_schema"
    timed cli_single "$JOBS" enqueue_lines "$single_schema" "$WORK/single.jsonl" --batch-size 1
    expect_jobs "$single_schema" "$JOBS"
    cli_schema "$process_schema"
    timed cli_process "$PROCESS_JOBS" enqueue_processes "$process_schema"
    expect_jobs "$process_schema" "$PROCESS_JOBS"
    run_peer graphile.single jobs_per_s -- graphile enqueue-single --jobs "$JOBS"
    run_peer pgboss.single jobs_per_s -- pgboss enqueue-single --jobs "$JOBS"
    pgbench_reference
    pgbench_jobs_reference
  fi

  if want bulk; then
    cli_schema "$bulk_schema"
    timed cli_bulk "$BULK_JOBS" enqueue_lines "$bulk_schema" "$lines"
    expect_jobs "$bulk_schema" "$BULK_JOBS"
    run_oncely client_batch "jobs_per_s client_cpu_us_per_job" -- enqueue-batch --jobs "$BULK_JOBS" --batch 1000
    run_peer graphile.bulk jobs_per_s -- graphile enqueue-bulk --chunk 1000 --jobs "$BULK_JOBS"
    run_peer pgboss.bulk jobs_per_s -- pgboss enqueue-bulk --chunk 1000 --jobs "$BULK_JOBS"
  fi

  if want adverse; then
    fields="jobs_per_s worker_cpu_us_per_job concurrency batch"
    run_oncely slow1 "$fields" -- process --jobs "$SLOW_JOBS" --handler-ms 1
    run_peer graphile.slow1 jobs_per_s -- graphile burn --config 2p-c24-lq500-cb0 --jobs "$SLOW_JOBS" --handler-ms 1
    run_oncely slow10 "$fields" -- process --jobs "$SLOW10_JOBS" --handler-ms 10
    run_peer graphile.slow10 jobs_per_s -- graphile burn --config 2p-c24-lq500-cb0 --jobs "$SLOW10_JOBS" --handler-ms 10
    proxy_start
    DATABASE_URL=$PROXY_URL run_oncely rtt "$fields" -- process --jobs "$JOBS"
    DATABASE_URL=$PROXY_URL run_peer graphile.rtt jobs_per_s -- graphile burn --config 2p-c24-lq500-cb0 --jobs "$JOBS"
    proxy_stop
    snapshot_hold
    run_oncely held "$fields" -- process --jobs "$BIG_JOBS"
    snapshot_release
    run_peer graphile.held jobs_per_s -- graphile burn --config 2p-c24-lq500-cb0 --jobs "$BIG_JOBS" --hold-snapshot
    run_oncely scheduled "$fields" -- process --jobs "$DUE_JOBS" --scheduled "$SCHEDULED_JOBS"
    run_oncely due_only "$fields" -- process --jobs "$DUE_JOBS"
    run_oncely queues "$fields" -- process --jobs $((QUEUES * QUEUE_JOBS)) --queues "$QUEUES" --concurrency 1
  fi
done

# ---- the table ----------------------------------------------------------------------------

rate() { [ -n "$1" ] && echo "$(thousands "$1") jobs/s" || echo "—"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "—"; else printf "%.2f×", a / b }'; }
row() { printf '| %s | %s | %s | %s |\n' "$@"; }
# vs SCENARIO ONCELY_TEXT ONCELY_VALUE PEER_LABEL PEER_KEY: a row comparing with one peer.
vs() {
  local value
  value=$(med "$5.jobs_per_s" || true)
  [ -n "$value" ] || [ -n "$NODE" ] || [ "$1" != "$same" ] || return 0  # no peers: one row per scenario
  row "$1" "$2" "$4: $(rate "$value")" "$(ratio "$3" "$value")"
}
burn_text() {  # burn_text KEY: "N jobs/s (concurrency C, batch B; X µs worker CPU/job)"
  printf '%s (concurrency %s, batch %s; %.1f µs worker CPU per job)' "$(rate "$(med "$1.jobs_per_s")")" \
    "$(med "$1.concurrency")" "$(med "$1.batch")" "$(med "$1.worker_cpu_us_per_job")"
}
latency_text() {  # latency_text KEY P50_FIELD P99_FIELD
  local p50 p99
  p50=$(med "$1.$2" || true)
  p99=$(med "$1.$3" || true)
  [ -n "$p50" ] && printf 'p50 %.2f ms, p99 %.2f ms' "$p50" "$p99" || echo "—"
}
same="〃"
peer_versions=""
if [ -n "$NODE" ]; then
  peer_versions="; graphile-worker $(peer_version graphile-worker), pg-boss $(peer_version pg-boss), Node $("$NODE" --version)"
fi

echo
echo "oncely $(git -C "$ROOT" describe --always --dirty) on $(machine_line)"
echo "$(server_line "$DATABASE_URL"); same machine, TCP loopback$peer_versions"
echo "command: $COMMAND — medians of $RUNS interleaved runs"
echo
echo "| scenario | oncely | compared with | oncely/peer |"
echo "|---|---|---|---|"
if want burn; then
  v=$(med burn.jobs_per_s)
  vs "burn-down, $(thousands "$JOBS") pre-inserted no-op jobs, oncely's default concurrency and batch" \
    "$(burn_text burn)" "$v" "graphile-worker 2p-c24-lq500-cb0 (its best)" graphile.burn
  row "$same" "$(burn_text burn)" "ceiling: the stand-in (claim + marker + delete, 500 per transaction, 1 connection, pgbench): $(rate "$(med standin.burn.jobs_per_s)")" \
    "$(ratio "$v" "$(med standin.burn.jobs_per_s)")"
  v=$(med burn_lease.jobs_per_s)
  vs "lease mode burn-down, $(thousands "$JOBS") pre-inserted no-op jobs, lease 30s, $LEASE_CONNECTIONS connection(s)" \
    "$(burn_text burn_lease)" "$v" "graphile-worker 2p-c24-lq500-cb0 (its best)" graphile.burn
fi
if want big; then
  v=$(med burn_big.jobs_per_s)
  vs "burn-down, $(thousands "$BIG_JOBS") no-op jobs, defaults" "$(burn_text burn_big)" "$v" \
    "graphile-worker 2p-c24-lq500-cb0" graphile.burn_big
  row "$same" "$(burn_text burn_big)" "ceiling: the stand-in: $(rate "$(med standin.burn_big.jobs_per_s)")" \
    "$(ratio "$v" "$(med standin.burn_big.jobs_per_s)")"
fi
if want increment; then
  v=$(med increment.jobs_per_s)
  vs "burn-down, $(thousands "$JOBS") jobs whose handler upserts a row in the job's transaction, defaults" \
    "$(burn_text increment)" "$v" "pg-boss b100-c4-burst-tx (transactional, its handler writes nothing)" pgboss.tx
fi

if want latency; then
  o50=$(med latency.p50_ms)
  olat=$(latency_text latency p50_ms p99_ms)
  g50=$(med graphile.latency.p50_ms || true)
  b50=$(med pgboss.latency.p50_ms || true)
  row "idle worker: enqueue issued → handler start ($SAMPLES samples)" "$olat" \
    "graphile-worker c24-lq500-cb0: $(latency_text graphile.latency p50_ms p99_ms)" \
    "$(ratio "$o50" "$g50") (p50; below 1 is better)"
  [ -z "$NODE" ] || row "$same" "$olat" "pg-boss b1-c1-notify: $(latency_text pgboss.latency p50_ms p99_ms)" \
    "$(ratio "$o50" "$b50") (p50)"
fi

single_rows() {  # single_rows SCENARIO KEY: against both peers and pgbench
  local v text
  v=$(med "$2.jobs_per_s")
  text=$(rate "$v")
  [ -z "$(med "$2.client_cpu_us_per_job" || true)" ] || text+=$(printf ' (%.0f µs client CPU per job)' "$(med "$2.client_cpu_us_per_job")")
  vs "$1" "$text" "$v" "graphile-worker addJob() per job" graphile.single
  vs "$same" "$text" "$v" "pg-boss send() per job" pgboss.single
  vs "$same" "$text" "$v" "reference: pgbench, one prepared autocommit INSERT per job, 1 client" pgbench
  vs "$same" "$text" "$v" "reference: the same pgbench INSERT into oncely's jobs table, its INSERT trigger on" pgbench_jobs_triggers
  vs "$same" "$text" "$v" "reference: the same, its INSERT trigger disabled" pgbench_jobs_no_triggers
}
if want single; then
  single_rows "single enqueue, C++ Client::enqueue(), one call (transaction) per job, 1 producer thread, $(thousands "$JOBS") jobs" client_single
  single_rows "single enqueue, \`oncely enqueue - --batch-size 1\` (one autocommit INSERT per line), $(thousands "$JOBS") lines" cli_single
  row "single enqueue, one \`oncely enqueue KIND PAYLOAD\` process per job ($(thousands "$PROCESS_JOBS") jobs; process start and connect dominate)" \
    "$(rate "$(med cli_process.jobs_per_s)")" "—" "—"
fi
if want bulk; then
  v=$(med cli_bulk.jobs_per_s)
  vs "bulk enqueue, \`oncely enqueue -\` (COPY, 5,000 per transaction), $(thousands "$BULK_JOBS") jobs" "$(rate "$v")" "$v" \
    "graphile-worker addJobs(), 1,000 per call" graphile.bulk
  vs "$same" "$(rate "$v")" "$v" "pg-boss insert(), 1,000 per call" pgboss.bulk
  v=$(med client_batch.jobs_per_s)
  vs "bulk enqueue, C++ Client::enqueue_batch() (COPY), 1,000 per call, $(thousands "$BULK_JOBS") jobs" "$(rate "$v")" "$v" \
    "graphile-worker addJobs(), 1,000 per call" graphile.bulk
  vs "$same" "$(rate "$v")" "$v" "pg-boss insert(), 1,000 per call" pgboss.bulk
fi
if want adverse; then
  v=$(med slow1.jobs_per_s)
  vs "adverse: $(thousands "$SLOW_JOBS") jobs whose handler waits 1 ms, defaults" "$(burn_text slow1)" "$v" \
    "graphile-worker 2p-c24-lq500-cb0, the same handler" graphile.slow1
  v=$(med slow10.jobs_per_s)
  vs "adverse: $(thousands "$SLOW10_JOBS") jobs whose handler waits 10 ms, defaults" "$(burn_text slow10)" "$v" \
    "graphile-worker 2p-c24-lq500-cb0, the same handler" graphile.slow10
  v=$(med rtt.jobs_per_s)
  vs "adverse: $(thousands "$JOBS") no-op jobs, $RTT_MS ms of round trip added between worker and server (a delaying proxy), defaults" \
    "$(burn_text rtt)" "$v" "graphile-worker 2p-c24-lq500-cb0 through the same proxy" graphile.rtt
  v=$(med held.jobs_per_s)
  vs "adverse: $(thousands "$BIG_JOBS") no-op jobs while a REPEATABLE READ reader holds its snapshot for the whole run, defaults" \
    "$(burn_text held)" "$v" "graphile-worker 2p-c24-lq500-cb0, the same reader" graphile.held
  row "$same" "$(burn_text held)" "oncely's own $(thousands "$BIG_JOBS")-job burn-down without the reader: $(rate "$(med burn_big.jobs_per_s || true)")" \
    "$(ratio "$v" "$(med burn_big.jobs_per_s || true)")"
  v=$(med scheduled.jobs_per_s)
  row "adverse: $(thousands "$DUE_JOBS") due no-op jobs beside $(thousands "$SCHEDULED_JOBS") scheduled an hour ahead, defaults" \
    "$(burn_text scheduled)" "oncely, the same $(thousands "$DUE_JOBS") due jobs alone: $(rate "$(med due_only.jobs_per_s)")" \
    "$(ratio "$v" "$(med due_only.jobs_per_s)")"
  row "adverse: $QUEUES queues of $QUEUE_JOBS no-op jobs each, one thread per queue" "$(burn_text queues)" "—" "—"
fi
echo
echo "oncely/peer: throughput ratio (above 1: oncely is faster), except latency (p50 ratio, below 1: oncely is faster)."

{
  echo
  echo "per-run values:"
  for key in $(printf '%s\n' "${!V[@]}" | sort); do echo "  $key:${V[$key]}"; done
} >&2
