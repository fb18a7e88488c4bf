#!/usr/bin/env bash
# A long no-op burn-down, sampled every second: is memory flat, and does throughput hold
# while dead tuples pile up in the jobs table?
#
#   bash bench/soak.sh                                   # 1,000,000 jobs, oncely's defaults
#   JOBS=200000 CONCURRENCY=2 BATCH=500 bash bench/soak.sh
#   HISTORY=1 RATE=8000 MINUTES=60 WINDOW_S=600 bash bench/soak.sh   # completed-job records at volume
#
# HISTORY=1: instead of a burn-down, `oncely_bench history-soak`: RATE keyed no-op jobs a second
# offered for MINUTES with a dedup window of WINDOW_S seconds, so that the completed jobs'
# records reach RATE × WINDOW_S and their pruning must keep up; sampled every minute (jobs
# served a second, claim p99, enqueue → start p99, records kept, table and index sizes, dead
# tuples, RSS). Writes the samples to OUT (bench/results/history-soak.jsonl) and a plot of
# them to PLOT (docs/images/history-soak.png, with Debian's gnuplot), and says whether the
# last 30 minutes were flat (every figure within ±10 % of its first steady value); exit 1
# if not. docs/benchmarks.md ("Completed-job history") has a run.
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
if [ "${HISTORY:-0}" = 1 ]; then
  RATE=${RATE:-8000} MINUTES=${MINUTES:-60} WINDOW_S=${WINDOW_S:-600}
  OUT=${OUT:-$ROOT/bench/results/history-soak.jsonl} PLOT=${PLOT:-$ROOT/docs/images/history-soak.png}
  echo "command: HISTORY=1 RATE=$RATE MINUTES=$MINUTES WINDOW_S=$WINDOW_S${CONCURRENCY:+ CONCURRENCY=$CONCURRENCY}${BATCH:+ BATCH=$BATCH} bash bench/soak.sh"
  status=0
  "$BENCH" history-soak --rate "$RATE" --minutes "$MINUTES" --dedup-window-s "$WINDOW_S" --out "$OUT" \
    "${flags[@]}" || status=$?
  if ! command -v gnuplot >/dev/null; then
    say "installing Debian's gnuplot-nox for the plot"
    $([ "$(id -u)" = 0 ] || echo sudo) apt-get install -y -qq --no-install-recommends gnuplot-nox >/dev/null
  fi
  # gnuplot reads columns: the JSON samples as a table, in the order history_soak.gp names them.
  table=$(mktemp /tmp/oncely-history-soak.XXXXXX)
  python3 -c 'import json, sys
keys = ["minute", "served_per_s", "offered_per_s", "claim_p99_ms", "wait_p99_ms", "records", "jobs_mib",
        "records_table_mib", "records_index_mib", "jobs_dead", "records_dead", "rss_mib"]
for line in open(sys.argv[1]):
    sample = json.loads(line)
    print(" ".join(str(sample[k]) for k in keys))' "$OUT" >"$table"
  gnuplot -e "data='$table'; out='$PLOT'" "$ROOT/bench/history_soak.gp"
  rm -f "$table"
  say "samples in $OUT, plot in $PLOT"
  exit "$status"
fi
echo "command: JOBS=$JOBS INTERVAL_MS=$INTERVAL_MS${CONCURRENCY:+ CONCURRENCY=$CONCURRENCY}${BATCH:+ BATCH=$BATCH} bash bench/soak.sh"
echo
"$BENCH" soak --jobs "$JOBS" --interval-ms "$INTERVAL_MS" "${flags[@]}"
