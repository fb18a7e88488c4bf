#!/usr/bin/env bash
# The burn-down as the worker role: the same pre-inserted jobs run by a runtime connected as
# DATABASE_URL's role (the schema's owner) and by one connected as a login role granted only
# <schema>_worker (`oncely migrate --roles`), interleaved, medians of RUNS:
#
#   bash bench/as_role.sh
#   RUNS=5 JOBS=100000 HANDLER=increment MODE=lease bash bench/as_role.sh
#   BENCH=build/bench/oncely_bench DATABASE_URL=postgresql://... bash bench/as_role.sh   # no build
#
# JOBS (100000), HANDLER (noop | increment), MODE (transaction | lease: concurrency 50, batch
# 500). Prints one Markdown table row per role on stdout. DATABASE_URL's role must be able to
# create roles (CREATEROLE); each run's schema and roles are dropped afterwards.
set -euo pipefail
GIVEN_BENCH=${BENCH:-}
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

RUNS=${RUNS:-3}
JOBS=${JOBS:-100000}
HANDLER=${HANDLER:-noop}
MODE=${MODE:-transaction}
trap bench_cleanup_local_database EXIT
if [ -n "$GIVEN_BENCH" ]; then BENCH=$GIVEN_BENCH; else bench_build; fi
bench_local_database

args=(process --jobs "$JOBS" --handler "$HANDLER" --mode "$MODE")
[ "$MODE" = lease ] && args+=(--concurrency 50 --batch 500)
owner=() worker=()
for run in $(seq 1 "$RUNS"); do
  say "pass $run of $RUNS"
  owner+=("$(field jobs_per_s "$("$BENCH" "${args[@]}")")")
  worker+=("$(field jobs_per_s "$("$BENCH" "${args[@]}" --as-worker-role)")")
done
echo "| runtime connected as | jobs/s (median of $RUNS) | runs |"
echo "|---|---|---|"
echo "| the schema's owner | $(thousands "$(median "${owner[@]}")") | $(for v in "${owner[@]}"; do printf '%s ' "$(thousands "$v")"; done)|"
echo "| a login role granted only <schema>_worker | $(thousands "$(median "${worker[@]}")") | $(for v in "${worker[@]}"; do printf '%s ' "$(thousands "$v")"; done)|"
