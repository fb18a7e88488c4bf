#!/usr/bin/env bash
# Runs one fuzz target: every input of its committed corpus (tests/fuzz/corpus/<name>),
# then libFuzzer's mutations for SECONDS, with its dictionary. New inputs go to
# WORK/corpus/<name> (never into the source tree), crashes to WORK/artifacts/<name>/, the
# whole log to WORK/<name>.log. Prints libFuzzer's final stats; exits non-zero on a crash,
# a sanitizer report, a failed invariant, a timeout (10 s for one input) or a leak.
# SEED fixes libFuzzer's mutations (the test suite's: a clean checkout explores the same
# inputs on every run, so a failure there is a regression, not the luck of that run);
# without it they are random (bench/fuzz.sh: exploration, to find what is new).
#   tests/fuzz/run.sh BINARY NAME SECONDS WORK [SEED]
set -euo pipefail
binary=$1 name=$2 seconds=$3 work=$4 seed=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work/corpus/$name" "$work/artifacts/$name"
args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len=4096
      -artifact_prefix="$work/artifacts/$name/")
[ -f "$here/dict/$name.dict" ] && args+=(-dict="$here/dict/$name.dict")
[ -n "$seed" ] && args+=(-seed="$seed")
log=$work/$name.log
status=0
"$binary" "${args[@]}" "$work/corpus/$name" "$here/corpus/$name" >"$log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  echo "fuzz $name: FAILED (exit $status); the end of $log:" >&2
  tail -n 60 "$log" >&2
  exit 1
fi
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log"
