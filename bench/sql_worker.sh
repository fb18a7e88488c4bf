#!/usr/bin/env bash
# The SQL-only worker (tests/conformance/sql_worker.py: Debian's Python with psycopg 3, nothing
# but the SQL worker protocol of docs/protocol.md) beside graphile-worker at its best, in one
# run on one Postgres: no-op burn-downs of JOBS jobs, interleaved, medians and the ratio.
#
#   bash bench/sql_worker.sh
#   RUNS=5 SQL_CONFIGS="1x8 2x8 2x16" bash bench/sql_worker.sh
#   ONCELY=build/src/oncely DATABASE_URL=postgresql://... bash bench/sql_worker.sh   # no build
#
# SQL_CONFIGS: the SQL worker's configurations, PROCESSESxCONCURRENCY. One process per core
# is the fair match for graphile-worker's best (2 processes of 24), since Python's GIL keeps
# one process on one core; the defaults are the best of a sweep on 2 cores (docs/benchmarks.md,
# "The SQL-only worker"). GRAPHILE_CONFIG (2p-c24-lq500-cb0): bench/peers/graphile.mjs's
# fastest burn-down. JOBS (20000), RUNS (3).
#
# Each SQL worker run gets a fresh schema (migrated, `default` made a lease queue with
# `oncely queue set`), as each peer run gets a fresh database; both are dropped afterwards.
# Every run waits for the quiet gate (bench/common.sh). Prints a Markdown table on stdout.
set -euo pipefail
GIVEN_ONCELY=${ONCELY:-}
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
# shellcheck source=bench/peers/peers.sh
source "$ROOT/bench/peers/peers.sh"

RUNS=${RUNS:-3}
JOBS=${JOBS:-20000}
SQL_CONFIGS=${SQL_CONFIGS:-"1x32 2x32"}
GRAPHILE_CONFIG=${GRAPHILE_CONFIG:-2p-c24-lq500-cb0}
PYTHON=/usr/bin/python3  # Debian's, which has python3-psycopg (scripts/deps.sh)
SCHEMA=oncely_sqlw_$$    # per process: two runs on one DATABASE_URL leave each other alone

cleanup() {
  set +e
  [ -z "${DATABASE_URL:-}" ] || psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
  bench_cleanup_local_database
}
trap cleanup EXIT

bench_cli "$GIVEN_ONCELY"
peers_install
bench_local_database

declare -A V  # configuration -> jobs/s of each run, space-separated
sql_run() {  # sql_run PxC
  local json
  psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
  "$ONCELY" --database-url "$DATABASE_URL" --schema "$SCHEMA" migrate >/dev/null
  "$ONCELY" --database-url "$DATABASE_URL" --schema "$SCHEMA" queue set default mode=lease >/dev/null
  bench_quiet_gate
  say "pass $run/$RUNS: sql_worker.py $1"
  json=$(ONCELY_SCHEMA=$SCHEMA "$PYTHON" "$ROOT/bench/sql_worker_burn.py" --jobs "$JOBS" \
    --processes "${1%x*}" --concurrency "${1#*x}")
  V[$1]+=" $(field jobs_per_s "$json")"
}
graphile_run() {
  bench_quiet_gate
  say "pass $run/$RUNS: graphile-worker $GRAPHILE_CONFIG"
  V[graphile]+=" $(field jobs_per_s "$(peer_run graphile burn --config "$GRAPHILE_CONFIG" --jobs "$JOBS")")"
}

for ((run = 1; run <= RUNS; run++)); do
  graphile_run
  for c in $SQL_CONFIGS; do sql_run "$c"; done
done

# shellcheck disable=SC2086  # the values are a word list
graphile=$(median ${V[graphile]})
echo "| no-op burn-down, $JOBS jobs | jobs/s, median of $RUNS | × graphile-worker | runs, in order |"
echo "|---|---|---|---|"
echo "| graphile-worker $(peer_version graphile-worker), $GRAPHILE_CONFIG | $(thousands "$graphile") | 1.00 |${V[graphile]} |"
for c in $SQL_CONFIGS; do
  # shellcheck disable=SC2086
  m=$(median ${V[$c]})
  echo "| sql_worker.py, ${c%x*} process(es) × concurrency ${c#*x} | $(thousands "$m") |" \
    "$(awk -v s="$m" -v g="$graphile" 'BEGIN { printf "%.2f", s / g }') |${V[$c]} |"
done
echo
echo "Command: RUNS=$RUNS JOBS=$JOBS SQL_CONFIGS='$SQL_CONFIGS' GRAPHILE_CONFIG=$GRAPHILE_CONFIG bash bench/sql_worker.sh"
echo "$(machine_line); $(server_line "$DATABASE_URL")"
