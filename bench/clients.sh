#!/usr/bin/env bash
# The Python and TypeScript clients beside graphile-worker, in one run on one Postgres:
# no-op burn-downs of JOBS jobs (and, with HANDLER_MS, handlers that wait that long),
# interleaved, medians, the ratio to graphile-worker's best, the workers' CPU per job and the
# most connections they held.
#
#   bash bench/clients.sh
#   RUNS=5 TS_CONFIGS="c24 2p-c24-pf500" PY_CONFIGS="1x24" bash bench/clients.sh
#   HANDLER_MS=10 TS_CONFIGS=c50 PY_CONFIGS=1x50 GRAPHILE_CONFIGS=c24 bash bench/clients.sh
#   ONCELY=build/src/oncely DATABASE_URL=postgresql://... bash bench/clients.sh   # no build
#
# TS_CONFIGS: bench/peers/oncely-ts.mjs's configurations (c24: one process of 24 handlers,
# its defaults; -pf500: 500 jobs leased ahead; -tx: a handler that takes the transaction, so a
# commit per job). PY_CONFIGS: bench/python_client.py runs, PROCESSESxCONCURRENCY[-pfN][-tx]
# (-pfN: N jobs leased ahead per process; -tx: handlers that take the transaction).
# GRAPHILE_CONFIGS: bench/peers/graphile.mjs's (2p-c24-lq500-cb0 is its fastest burn-down;
# the first one named is the ratio's reference). JOBS (20000), RUNS (3), HANDLER_MS (0).
#
# Every run gets a database or schema of its own and waits for the quiet gate
# (bench/common.sh). Prints a Markdown table on stdout.
set -euo pipefail
GIVEN_ONCELY=${ONCELY:-}
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
# shellcheck source=bench/peers/peers.sh
source "$ROOT/bench/peers/peers.sh"

RUNS=${RUNS:-3}
JOBS=${JOBS:-20000}
HANDLER_MS=${HANDLER_MS:-0}
TS_CONFIGS=${TS_CONFIGS-"c24 c24-pf2000 2p-c24-pf2000 c24-tx"}
PY_CONFIGS=${PY_CONFIGS-"1x24 2x24-pf2000 1x24-tx"}
GRAPHILE_CONFIGS=${GRAPHILE_CONFIGS-"2p-c24-lq500-cb0 c24"}
PYTHON=/usr/bin/python3  # Debian's, which has python3-psycopg (scripts/deps.sh)

cleanup() {
  set +e
  bench_cleanup_local_database
}
trap cleanup EXIT

bench_cli "$GIVEN_ONCELY"
# The TypeScript client, built as ctest's typescript_setup builds it.
TS_CLIENT=$BUILD_DIR/typescript-client
bash "$ROOT/tests/typescript/setup.sh" "$ROOT/clients/typescript" "$TS_CLIENT" >&2
peers_install
bench_local_database

declare -A V CPU CONN  # name -> the runs' jobs/s, worker CPU µs per job, most connections
record() {  # record NAME JSON
  V[$1]+=" $(printf '%.0f' "$(field jobs_per_s "$2")")"
  CPU[$1]+=" $(field worker_cpu_us_per_job "$2")"
  CONN[$1]+=" $(field most_connections "$2")"
}
graphile_run() {
  bench_quiet_gate
  say "pass $run/$RUNS: graphile-worker $1"
  record "graphile $1" "$(peer_run graphile burn --config "$1" --jobs "$JOBS" --handler-ms "$HANDLER_MS")"
}
ts_run() {
  bench_quiet_gate
  say "pass $run/$RUNS: oncely-ts $1"
  record "ts $1" "$(ONCELY_TS_CLIENT=$TS_CLIENT ONCELY_BIN=$ONCELY BENCH_SERVER_URL=$DATABASE_URL \
    "$PEER_NODE" "$PEERS_CACHE/oncely-ts.mjs" burn --config "$1" --jobs "$JOBS" --handler-ms "$HANDLER_MS")"
}
py_run() {  # PxC[-pfN][-tx]: P processes of C handlers, N jobs leased ahead, transactional handlers
  local config=$1 extra=()
  [[ $config == *-tx ]] && extra+=(--handler transactional)
  [[ $config =~ -pf([0-9]+) ]] && extra+=(--prefetch "${BASH_REMATCH[1]}")
  config=${config%%-*}
  bench_quiet_gate
  say "pass $run/$RUNS: python client $1"
  record "py $1" "$(DATABASE_URL=$DATABASE_URL ONCELY_BIN=$ONCELY "$PYTHON" "$ROOT/bench/python_client.py" \
    --jobs "$JOBS" --processes "${config%x*}" --concurrency "${config#*x}" --handler-ms "$HANDLER_MS" "${extra[@]}")"
}

for ((run = 1; run <= RUNS; run++)); do
  for c in $GRAPHILE_CONFIGS; do graphile_run "$c"; done
  for c in $TS_CONFIGS; do ts_run "$c"; done
  for c in $PY_CONFIGS; do py_run "$c"; done
done

read -r reference _ <<<"$GRAPHILE_CONFIGS"
# shellcheck disable=SC2086  # the values are word lists
best=$(median ${V["graphile $reference"]})
echo "| burn-down, $JOBS jobs, handlers of $HANDLER_MS ms | jobs/s, median of $RUNS | × graphile-worker $reference | worker CPU per job, µs | most connections | runs, in order |"
echo "|---|---|---|---|---|---|"
row() {  # row KEY LABEL
  # shellcheck disable=SC2086
  local m
  m=$(median ${V[$1]})
  echo "| $2 | $(thousands "$m") | $(awk -v s="$m" -v g="$best" 'BEGIN { printf "%.2f", s / g }') |" \
    "$(median ${CPU[$1]}) | $(tr ' ' '\n' <<<"${CONN[$1]}" | sort -n | tail -1) |${V[$1]} |"
}
for c in $GRAPHILE_CONFIGS; do row "graphile $c" "graphile-worker $(peer_version graphile-worker), $c"; done
for c in $TS_CONFIGS; do row "ts $c" "oncely TypeScript client, $c"; done
for c in $PY_CONFIGS; do row "py $c" "oncely Python client, $c"; done
echo
echo "Command: RUNS=$RUNS JOBS=$JOBS HANDLER_MS=$HANDLER_MS TS_CONFIGS='$TS_CONFIGS' PY_CONFIGS='$PY_CONFIGS'" \
  "GRAPHILE_CONFIGS='$GRAPHILE_CONFIGS' bash bench/clients.sh"
echo "$(machine_line); $(server_line "$DATABASE_URL")"
