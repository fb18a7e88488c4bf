#!/usr/bin/env bash
# No-op burn-down throughput for every concurrency × batch size, as a Markdown matrix of
# medians (jobs/s):
#
#   bash bench/scaling.sh
#   RUNS=5 CONCURRENCY="1 2 4" BATCHES="10 100" bash bench/scaling.sh
#
# Builds oncely in Release, then measures on DATABASE_URL or a throwaway PostgreSQL 15 with
# the benchmark settings (scripts/local-pg.sh, ONCELY_PG_PROFILE=bench). Each cell is
# `oncely_bench process` (pre-insert, then first handler start → last commit) run RUNS
# times: JOBS jobs (20000), BATCH1_JOBS (5000) for batch size 1, whose commit per job makes
# it the slow column. About 3 minutes with the defaults on 2 cores.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

RUNS=${RUNS:-3}
JOBS=${JOBS:-20000}
BATCH1_JOBS=${BATCH1_JOBS:-5000}
CONCURRENCY=${CONCURRENCY:-1 2 4 8 16}
BATCHES=${BATCHES:-1 10 100 500}

trap bench_cleanup_local_database EXIT
bench_build
bench_local_database

declare -A cell cpu
for c in $CONCURRENCY; do
  for b in $BATCHES; do
    n=$JOBS
    [ "$b" != 1 ] || n=$BATCH1_JOBS
    say "concurrency $c, batch $b: $n jobs × $RUNS runs"
    json=$("$BENCH" process --jobs "$n" --concurrency "$c" --batch "$b" --runs "$RUNS" 2>/dev/null)
    cell[$c.$b]=$(field jobs_per_s "$json")
    cpu[$c.$b]=$(field worker_cpu_us_per_job "$json")
  done
done

echo
echo "oncely $(git -C "$ROOT" describe --always --dirty) on $(machine_line)"
server_line "$DATABASE_URL"
echo "command: RUNS=$RUNS JOBS=$JOBS BATCH1_JOBS=$BATCH1_JOBS CONCURRENCY=\"$CONCURRENCY\" BATCHES=\"$BATCHES\" bash bench/scaling.sh"
echo
echo "No-op burn-down, jobs/s (worker CPU µs per job), median of $RUNS runs; $JOBS jobs per run ($BATCH1_JOBS for batch 1)."
echo
header="| concurrency \\ batch |"
rule="|---|"
for b in $BATCHES; do
  header+=" $b |"
  rule+="---|"
done
echo "$header"
echo "$rule"
for c in $CONCURRENCY; do
  line="| $c |"
  for b in $BATCHES; do line+=" $(thousands "${cell[$c.$b]}") ($(printf '%.1f' "${cpu[$c.$b]}")) |"; done
  echo "$line"
done
