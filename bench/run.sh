#!/usr/bin/env bash
# oncely's benchmarks: builds (Release), starts a throwaway PostgreSQL 15 with the same
# settings as the peer harness (../shared/peers/pg.sh: fsync, synchronous_commit and
# full_page_writes on; shared_buffers 1GB, max_wal_size 8GB, autovacuum_naptime 10s), runs
# every scenario RUNS times and prints a Markdown table of medians.
#
#   bench/run.sh                 # RUNS=3 JOBS=20000
#   RUNS=5 JOBS=100000 bench/run.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUNS=${RUNS:-3}
JOBS=${JOBS:-20000}
BUILD_DIR=${BENCH_BUILD_DIR:-$ROOT/build-bench}

"$ROOT/scripts/deps.sh"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DONCELY_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target oncely_bench oncely_cli >/dev/null
bench="$BUILD_DIR/bench/oncely_bench"
oncely="$BUILD_DIR/src/oncely"

if [ -z "${DATABASE_URL:-}" ]; then
  PG_DIR=$(mktemp -d /tmp/oncely-bench-pg.XXXXXX)
  trap '"$ROOT/scripts/local-pg.sh" stop "$PG_DIR"' EXIT
  DATABASE_URL=$(ONCELY_PG_PROFILE=bench "$ROOT/scripts/local-pg.sh" start "$PG_DIR")
  export DATABASE_URL
fi

field() { sed -E "s/.*\"$1\":([0-9.]+).*/\1/" <<<"$2"; }
row() {  # row LABEL ARGS...
  local label=$1; shift
  local out
  out=$("$bench" "$@" --runs "$RUNS" 2>/dev/null)
  if [[ "$*" == latency* ]]; then
    printf '| %s | p50 %.2f ms, p99 %.2f ms |  |\n' "$label" "$(field p50_ms "$out")" "$(field p99_ms "$out")"
  else
    printf '| %s | %.0f jobs/s | %.1f µs |\n' "$label" "$(field jobs_per_s "$out")" "$(field worker_cpu_us_per_job "$out")"
  fi
}

echo "oncely $(git -C "$ROOT" rev-parse --short HEAD) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);"
echo "PostgreSQL $(psql -XAtc 'SHOW server_version' "$DATABASE_URL"), fsync=$(psql -XAtc 'SHOW fsync' "$DATABASE_URL"),"\
     "synchronous_commit=$(psql -XAtc 'SHOW synchronous_commit' "$DATABASE_URL"); medians of $RUNS runs"
echo
echo "| scenario | result | worker CPU per job |"
echo "|---|---|---|"
row "burn-down, $JOBS no-op jobs, concurrency 2, batch 500" process --jobs "$JOBS" --concurrency 2 --batch 500
row "burn-down, $JOBS no-op jobs, concurrency 4, batch 100" process --jobs "$JOBS" --concurrency 4 --batch 100
row "burn-down, $JOBS upsert-increment jobs (in the job's transaction), concurrency 4" \
    process --jobs "$JOBS" --concurrency 4 --batch 100 --handler increment
row "idle worker: INSERT issued -> handler start (200 samples)" latency --samples 200

# Bulk enqueue: `oncely enqueue -` (COPY, 5,000 lines per transaction), 200,000 jobs.
lines=$(mktemp /tmp/oncely-bulk.XXXXXX)
awk 'BEGIN { for (i = 1; i <= 200000; i++) printf "{\"kind\":\"send_email\",\"payload\":{\"user_id\":%d},\"key\":\"user-%d\"}\n", i, i }' >"$lines"
rates=()
for run in $(seq 1 "$RUNS"); do
  schema="oncely_bulk_$run"
  "$oncely" --schema "$schema" migrate >/dev/null
  start=$(date +%s.%N)
  "$oncely" --schema "$schema" enqueue - <"$lines" >/dev/null
  end=$(date +%s.%N)
  rates+=("$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", 200000 / (e - s) }')")
  PGOPTIONS="-c client_min_messages=warning" psql -XAtqc "DROP SCHEMA $schema CASCADE" "$DATABASE_URL"
done
rm -f "$lines"
median=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")
printf '| bulk enqueue, 200,000 jobs, oncely enqueue - (COPY) | %s jobs/s |  |\n' "$median"
