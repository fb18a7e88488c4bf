#!/usr/bin/env bash
# Runs every fuzz target (tests/fuzz/*_fuzz.cpp) for SECONDS each (default 60) and prints
# a table of executions per second and total executions, from libFuzzer's final stats.
# Builds the targets with clang in $FUZZ_BUILD_DIR (default build-fuzz/) first. The
# corpora grow in $FUZZ_BUILD_DIR/runs/corpus/<target>, so a second run starts where the
# first stopped; crashes land in $FUZZ_BUILD_DIR/runs/artifacts/<target>/.
#   bash bench/fuzz.sh [SECONDS]      FUZZ_JOBS=2 runs two targets at a time
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
seconds=${1:-60}
build=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
jobs=${FUZZ_JOBS:-1}
cxx=${FUZZ_CXX:-clang++}

cmake -S "$ROOT/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" -j"$(nproc)" >&2

work=$build/runs
mkdir -p "$work"
names=()
for source in "$ROOT"/tests/fuzz/*_fuzz.cpp; do
  name=$(basename "$source" _fuzz.cpp)
  names+=("$name")
done

failed=0
run_one() {
  local name=$1
  if ! bash "$ROOT/tests/fuzz/run.sh" "$build/${name}_fuzz" "$name" "$seconds" "$work" >/dev/null; then
    echo "$name FAILED: see $work/$name.log and $work/artifacts/$name/" >&2
    return 1
  fi
}
running=0
for name in "${names[@]}"; do
  run_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || failed=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || failed=1; running=$((running - 1)); done

stat() { sed -n "s/^stat::$2: *//p" "$work/$1.log" | tail -n 1; }
echo "fuzz targets, ${seconds} s each ($(nproc) cores, $jobs at a time), $(clang++ --version | head -n 1)"
printf '%-16s %12s %16s %10s %8s\n' target "execs/s" "total execs" "new units" corpus
for name in "${names[@]}"; do
  printf '%-16s %12s %16s %10s %8s\n' "$name" "$(stat "$name" average_exec_per_sec)" \
    "$(stat "$name" number_of_executed_units)" "$(stat "$name" new_units_added)" \
    "$(find "$work/corpus/$name" "$ROOT/tests/fuzz/corpus/$name" -type f | wc -l)"
done
exit "$failed"
