#!/usr/bin/env bash
# Offered load while the xmin horizon is held back: what a long report, pg_dump or an idle
# transaction that took an xid does to the claim, against the same load on a clean server.
#
#   bash bench/held_xmin.sh
#   RUNS=3 RATE=800 SECONDS_=240 CONCURRENCY=32 bash bench/held_xmin.sh
#
# Each cell is `oncely_bench steady`: four producers enqueue RATE (800) jobs a second in all
# (one autocommit INSERT each) for SECONDS_ (60) seconds while one worker process with
# CONCURRENCY (32) threads runs them; the first 5 s are a warm-up. The cells:
#   none:    a clean server;
#   readers: four REPEATABLE READ transactions re-count `jobs` every 100 ms in one snapshot;
#   xid:     one transaction took an xid (txid_current()) and sits idle.
# Held for the whole run, so vacuum can remove no dead tuple of `jobs`. The cells run RUNS
# (3) times, interleaved; the table gives the medians: jobs served per second against the
# offered rate and the clean cell, the wait from enqueue to handler start (p50/p99), the share
# of claim statements over 50 ms and the bucket holding their p99 (the worker's
# oncely_claim_seconds histogram), and the claim statement's mean and max time when the
# server has pg_stat_statements preloaded.
# DATABASE_URL, or a throwaway Postgres as bench/run.sh starts.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

RUNS=${RUNS:-3}
RATE=${RATE:-800}
SECONDS_=${SECONDS_:-60}
CONCURRENCY=${CONCURRENCY:-32}
CELLS=(none readers xid)
trap bench_cleanup_local_database EXIT

bench_build
bench_local_database
psql_ "$DATABASE_URL" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" 2>/dev/null || true

declare -A served waits50 waits99 claim_mean claim_max claims_slow claim_p99
for run in $(seq 1 "$RUNS"); do
  for cell in "${CELLS[@]}"; do
    bench_quiet_gate
    say "run $run/$RUNS: $cell"
    out=$("$BENCH" steady --rate "$RATE" --seconds "$SECONDS_" --concurrency "$CONCURRENCY" --pin "$cell" 2>/dev/null)
    served[$cell]+=" $(field jobs_per_s "$out")"
    waits50[$cell]+=" $(field wait_p50_ms "$out")"
    waits99[$cell]+=" $(field wait_p99_ms "$out")"
    claim_mean[$cell]+=" $(field mean_ms "$out")"
    claim_max[$cell]+=" $(field max_ms "$out")"
    claims_slow[$cell]+=" $(awk -v a="$(field claims_over_50ms "$out")" -v b="$(field claims "$out")" 'BEGIN { print (b > 0) ? 100 * a / b : 0 }')"
    claim_p99[$cell]+=" $(field claim_p99_at_most_ms "$out")"
  done
done

clean=$(median ${served[none]})
echo
echo "Offered $RATE jobs/s for ${SECONDS_}s, one worker at concurrency $CONCURRENCY, medians of $RUNS interleaved runs"
echo "($(machine_line); $(server_line "$DATABASE_URL")):"
echo
echo "| xmin held back by | jobs/s served | of the clean cell | wait p50 | wait p99 | claims over 50 ms | claim p99 ≤ | claim mean | claim max |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for cell in "${CELLS[@]}"; do
  s=$(median ${served[$cell]})
  mean=$(median ${claim_mean[$cell]} 2>/dev/null || echo "")
  max=$(median ${claim_max[$cell]} 2>/dev/null || echo "")
  p99=$(median ${claim_p99[$cell]} 2>/dev/null || echo "")
  printf '| %s | %s | %.0f %% | %.1f ms | %.1f ms | %.2f %% | %s | %s | %s |\n' "$cell" "$(thousands "$s")" \
    "$(awk -v a="$s" -v b="$clean" 'BEGIN { print 100 * a / b }')" "$(median ${waits50[$cell]})" "$(median ${waits99[$cell]})" \
    "$(median ${claims_slow[$cell]})" "${p99:+$p99 ms}" "${mean:+$(printf '%.2f ms' "$mean")}" "${max:+$(printf '%.1f ms' "$max")}"
done
echo
echo "Command: RUNS=$RUNS RATE=$RATE SECONDS_=$SECONDS_ CONCURRENCY=$CONCURRENCY bash bench/held_xmin.sh"
