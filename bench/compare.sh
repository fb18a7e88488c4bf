#!/usr/bin/env bash
# Did a change cost anything? oncely at an earlier revision against the working tree, on one
# Postgres, interleaved (old, new, old, new, ...), medians per scenario:
#
#   bash bench/compare.sh 7aa5359            # RUNS=6 by default
#   RUNS=9 JOBS=20000 bash bench/compare.sh HEAD~3
#   SCENARIOS=burn bash bench/compare.sh HEAD~3   # only the three burn-downs
#   OLD_BENCH=../old/build/bench/oncely_bench NEW_BENCH=build/bench/oncely_bench bash bench/compare.sh old
#
# The earlier revision is checked out into a temporary git worktree and built in Release
# beside the working tree's build (build-bench/). Absolute figures drift on a shared VM;
# the interleaving keeps the two sides under the same drift, so compare the ratio.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
BASE=${1:?usage: bench/compare.sh REVISION}
RUNS=${RUNS:-6}
JOBS=${JOBS:-20000}
SAMPLES=${SAMPLES:-60}
SCENARIOS=${SCENARIOS:-all}  # all, or burn

OLD_TREE=$(mktemp -d /tmp/oncely-compare.XXXXXX)
cleanup() {
  set +e
  git -C "$ROOT" worktree remove --force "$OLD_TREE" >/dev/null 2>&1
  rm -rf "$OLD_TREE"
  bench_cleanup_local_database
}
trap cleanup EXIT

# OLD_BENCH / NEW_BENCH: oncely_bench binaries already built (the same flags on both
# sides), instead of the two Release builds; REVISION then only labels the table.
if [ -z "${NEW_BENCH:-}" ]; then
  bench_build
  NEW_BENCH=$BENCH
fi
if [ -z "${OLD_BENCH:-}" ]; then
  git -C "$ROOT" worktree add --detach -q "$OLD_TREE" "$BASE"
  say "building $BASE (Release) in $OLD_TREE/build-bench"
  (cmake -S "$OLD_TREE" -B "$OLD_TREE/build-bench" -DCMAKE_BUILD_TYPE=Release -DONCELY_BUILD_TESTS=OFF &&
    cmake --build "$OLD_TREE/build-bench" -j"$(nproc)" --target oncely_bench) >/dev/null
  OLD_BENCH=$OLD_TREE/build-bench/bench/oncely_bench
fi
bench_local_database

declare -A values
measure() {  # measure SIDE KEY FIELD -- ARGS...
  local side=$1 key=$2 name=$3 bench json
  shift 4
  bench=$NEW_BENCH
  [ "$side" = old ] && bench=$OLD_BENCH
  json=$("$bench" "$@" --runs 1 2>/dev/null)
  values["$key/$side"]+=" $(field "$name" "$json")"
}
for ((run = 1; run <= RUNS; run++)); do
  say "pass $run/$RUNS"
  for side in old new; do
    measure "$side" "burn-down, $JOBS no-op jobs (jobs/s)" jobs_per_s -- process --jobs "$JOBS"
    measure "$side" "worker CPU per no-op job (µs)" worker_cpu_us_per_job -- process --jobs "$JOBS"
    measure "$side" "burn-down, $JOBS upserts in the job's transaction (jobs/s)" jobs_per_s -- process --jobs "$JOBS" --handler increment
    measure "$side" "lease-mode burn-down, $JOBS no-op jobs (jobs/s)" jobs_per_s -- process --jobs "$JOBS" \
      --mode lease --lease-ms 30000 --concurrency 500 --batch 500 --connections 2
    [ "$SCENARIOS" = all ] || continue
    measure "$side" "single enqueue, Client::enqueue (jobs/s)" jobs_per_s -- enqueue-single --jobs "$JOBS"
    measure "$side" "bulk enqueue, Client::enqueue_batch by 1,000 (jobs/s)" jobs_per_s -- enqueue-batch --jobs $((JOBS * 5)) --batch 1000
    measure "$side" "idle latency p50, $SAMPLES samples (ms)" p50_ms -- latency --samples "$SAMPLES"
  done
done

echo "| scenario (medians of $RUNS interleaved runs) | $BASE | working tree | new/old |"
echo "|---|---|---|---|"
for key in "burn-down, $JOBS no-op jobs (jobs/s)" "worker CPU per no-op job (µs)" \
  "burn-down, $JOBS upserts in the job's transaction (jobs/s)" "lease-mode burn-down, $JOBS no-op jobs (jobs/s)" \
  "single enqueue, Client::enqueue (jobs/s)" \
  "bulk enqueue, Client::enqueue_batch by 1,000 (jobs/s)" "idle latency p50, $SAMPLES samples (ms)"; do
  [ -n "${values["$key/old"]:-}" ] || continue  # not measured (SCENARIOS)
  # shellcheck disable=SC2086  # the values are a word list
  old=$(median ${values["$key/old"]}) new=$(median ${values["$key/new"]})
  echo "| $key | $old | $new | $(awk -v o="$old" -v n="$new" 'BEGIN { printf "%.2f", n / o }') |"
done
echo
echo "Every run, in order (the spread says how far to trust a ratio):"
for key in "${!values[@]}"; do echo "- $key:${values[$key]}"; done | sort
echo
echo "$(machine_line); $(server_line "$DATABASE_URL")"
