#!/usr/bin/env bash
# What span export costs (docs/opentelemetry.md): the no-op burn-down with export off, on
# with the default queue (2,048 spans: at tens of thousands of jobs a second most spans are
# dropped, counted), and on with a queue that holds a run's every span, to a local OTLP/HTTP
# receiver (bench/otlp_sink.py); interleaved (off, on, roomy, off, ...) on one Postgres,
# medians per mode, with the spans each run dropped (the exporter's counters), so that a run
# whose spans were dropped rather than sent cannot pass for a cheap one.
#
#   bash bench/otel_cost.sh                     # RUNS=5, JOBS=20000, both modes
#   BENCH_BIN=build/bench/oncely_bench bash bench/otel_cost.sh   # an oncely_bench already built
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
RUNS=${RUNS:-5}
JOBS=${JOBS:-20000}
if [ -n "${BENCH_BIN:-}" ]; then
  BENCH=$BENCH_BIN
else
  bench_build
fi
bench_local_database
SINK_DIR=$(mktemp -d /tmp/oncely-otel-sink.XXXXXX)
cleanup() {
  set +e
  [ -n "${SINK_PID:-}" ] && kill "$SINK_PID" 2>/dev/null
  rm -rf "$SINK_DIR"
  bench_cleanup_local_database
}
trap cleanup EXIT

python3 "$ROOT/bench/otlp_sink.py" "$SINK_DIR/port" >"$SINK_DIR/counts" &
SINK_PID=$!
for _ in $(seq 100); do [ -s "$SINK_DIR/port" ] && break; sleep 0.1; done
PORT=$(cat "$SINK_DIR/port")
say "receiver on 127.0.0.1:$PORT"

declare -A values
# on: the defaults (a queue of 2,048 spans); roomy: a queue that holds a whole run's spans, so
# that every span is sent and the cost is the whole cost.
measure() {  # measure KEY EXPORT -- ARGS...
  local key=$1 export=$2 json
  shift 3
  if [ "$export" = off ]; then
    json=$("$BENCH" "$@" --runs 1 2>/dev/null)
  else
    local queue=2048
    [ "$export" = roomy ] && queue=$((JOBS * 4))
    json=$(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$PORT" OTEL_SERVICE_NAME=oncely-bench \
      OTEL_BSP_MAX_QUEUE_SIZE=$queue "$BENCH" "$@" --runs 1 2>/dev/null)
    values["$key, spans dropped/$export"]+=" $(field otel_spans_dropped "$json")"
  fi
  values["$key/$export"]+=" $(field jobs_per_s "$json")"
}
for ((run = 1; run <= RUNS; run++)); do
  say "pass $run/$RUNS"
  for export in off on roomy; do
    measure "burn-down, $JOBS no-op jobs (jobs/s)" "$export" -- process --jobs "$JOBS"
    measure "lease-mode burn-down, $JOBS no-op jobs (jobs/s)" "$export" -- process --jobs "$JOBS" \
      --mode lease --lease-ms 30000 --concurrency 500 --batch 500 --connections 2
  done
done
kill "$SINK_PID"
wait "$SINK_PID" || true
SINK_PID=""

echo "| scenario (medians of $RUNS interleaved runs) | export off | on (queue 2,048) | on/off | spans dropped | on (queue $((JOBS * 4))) | on/off | spans dropped |"
echo "|---|---|---|---|---|---|---|---|"
for key in "burn-down, $JOBS no-op jobs (jobs/s)" "lease-mode burn-down, $JOBS no-op jobs (jobs/s)"; do
  # shellcheck disable=SC2086  # the values are word lists
  off=$(median ${values["$key/off"]}) on=$(median ${values["$key/on"]}) roomy=$(median ${values["$key/roomy"]})
  # shellcheck disable=SC2086
  dropped=$(median ${values["$key, spans dropped/on"]}) dropped_roomy=$(median ${values["$key, spans dropped/roomy"]})
  echo "| $key | $(thousands "$off") | $(thousands "$on") | $(awk -v o="$off" -v n="$on" 'BEGIN { printf "%.2f", n / o }') |" \
    "$(thousands "$dropped") of $((JOBS * 2)) | $(thousands "$roomy") | $(awk -v o="$off" -v n="$roomy" 'BEGIN { printf "%.2f", n / o }') |" \
    "$(thousands "$dropped_roomy") of $((JOBS * 2)) |"
done
echo
echo "The receiver got: $(cat "$SINK_DIR/counts") ($((RUNS * 4 * JOBS * 2)) spans made in the runs with export on: a process and a settle span per job)"
echo "Every run, in order (the spread says how far to trust a ratio):"
for key in "${!values[@]}"; do echo "- $key:${values[$key]}"; done | sort
echo
echo "$(machine_line); $(server_line "$DATABASE_URL")"
