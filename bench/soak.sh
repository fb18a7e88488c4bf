#!/usr/bin/env bash
# A long no-op burn-down, sampled every second: is memory flat, and does throughput hold
# while dead tuples pile up in the jobs table?
#
#   bash bench/soak.sh                                   # 1,000,000 jobs, oncely's defaults
#   JOBS=200000 CONCURRENCY=2 BATCH=500 bash bench/soak.sh
#
# Builds oncely in Release, then runs `oncely_bench soak` on DATABASE_URL or a throwaway
# PostgreSQL 15 with the benchmark settings (scripts/local-pg.sh,
# ONCELY_PG_PROFILE=bench; autovacuum_naptime 10s). Prints, every INTERVAL_MS (1000): time
# since the first handler start, jobs done, throughput over the last interval, the worker
# process's RSS (VmRSS) and the jobs table's n_dead_tup and autovacuum count
# (pg_stat_user_tables); then a summary: RSS first/max/last, worker CPU per job, and
# min/median/max interval throughput. Pre-inserting a million jobs takes a while of its own.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

JOBS=${JOBS:-1000000}
INTERVAL_MS=${INTERVAL_MS:-1000}
flags=()
[ -z "${CONCURRENCY:-}" ] || flags+=(--concurrency "$CONCURRENCY")
[ -z "${BATCH:-}" ] || flags+=(--batch "$BATCH")

trap bench_cleanup_local_database EXIT
bench_build
bench_local_database

echo "oncely $(git -C "$ROOT" describe --always --dirty) on $(machine_line)"
server_line "$DATABASE_URL"
echo "command: JOBS=$JOBS INTERVAL_MS=$INTERVAL_MS${CONCURRENCY:+ CONCURRENCY=$CONCURRENCY}${BATCH:+ BATCH=$BATCH} bash bench/soak.sh"
echo
"$BENCH" soak --jobs "$JOBS" --interval-ms "$INTERVAL_MS" "${flags[@]}"
