#!/usr/bin/env bash
# The console's page weights and times with 100,000 dead letters and 1,000,000 jobs.
#   bench/console.sh ONCELY_BINARY DATABASE_URL [REQUESTS]
# Fills a scratch schema (bench_console) with one INSERT ... SELECT generate_series each,
# starts `oncely web` on a free loopback port, requests each page REQUESTS times (default
# 20) one at a time with curl, and prints its size in bytes and p50/p95 in milliseconds.
# The schema is dropped at the end.
set -euo pipefail
oncely=$1 url=$2 n=${3:-20}
schema=bench_console
psql_() { psql "$url" -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }
psql_ "SET client_min_messages = warning; DROP SCHEMA IF EXISTS $schema CASCADE"
"$oncely" --database-url "$url" --schema "$schema" migrate >/dev/null
psql_ "INSERT INTO $schema.dead_letters (job_id, queue, kind, payload, priority, attempts, last_error, error_class,
                                         errors, created_at, failed_at)
       SELECT i, (ARRAY['payments', 'mail', 'sync'])[1 + i % 3], 'charge', jsonb_build_object('n', i), 0, 3,
              (ARRAY['connection to payments.internal:' || (i % 50) || ' refused', 'HTTP 503 from crm #' || i,
                     'timeout after ' || i || ' ms'])[1 + i % 3] || CASE WHEN i % 1000 = 0 THEN ' rare ' || i ELSE '' END,
              'exhausted', '[]', now() - interval '1 day', now() - i * interval '1 second'
         FROM generate_series(1, 100000) AS i"
psql_ "INSERT INTO $schema.jobs (queue, kind, payload, run_at)
       SELECT (ARRAY['payments', 'mail', 'sync'])[1 + i % 3], 'charge', jsonb_build_object('n', i),
              now() + (i % 2) * interval '1 hour'
         FROM generate_series(1, 1000000) AS i"
psql_ "ANALYZE $schema.jobs; ANALYZE $schema.dead_letters"
dl=$(psql_ "SELECT max(id) FROM $schema.dead_letters")
job=$(psql_ "SELECT max(id) FROM $schema.jobs")

out=$(mktemp)
"$oncely" --database-url "$url" --schema "$schema" web --addr 127.0.0.1:0 >"$out" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; psql_ "SET client_min_messages = warning; DROP SCHEMA IF EXISTS $schema CASCADE"; rm -f "$out"' EXIT
for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.1; done
base=$(grep -o 'http://[^ ]*' "$out")
cookie=$(curl -s -o /dev/null -D - "$base/assets/app.css" >/dev/null; curl -s -D - -o /dev/null "$base/" | sed -n 's/^Set-Cookie: \([^;]*\).*/\1/p')

printf '%-44s %10s %8s %8s\n' page bytes p50_ms p95_ms
for path in / /dead-letters "/dead-letters?queue=payments" "/dead-letters?pattern=timeout%20after%20%23%20ms" \
            "/dead-letters/$dl" "/dead-letters/confirm?action=replay&queue=payments" /jobs "/jobs?state=ready" \
            "/jobs?queue=mail&after=500000" "/jobs/$job" /queues /workers /cron; do
  times=()
  bytes=0
  for _ in $(seq "$n"); do
    read -r t b < <(curl -s -o /dev/null -H "Cookie: $cookie" -w '%{time_total} %{size_download}\n' "$base$path")
    times+=("$t")
    bytes=$b
  done
  sorted=$(printf '%s\n' "${times[@]}" | sort -n)
  p50=$(echo "$sorted" | awk -v n="$n" 'NR == int((n + 1) / 2) { printf "%.0f", $1 * 1000 }')
  p95=$(echo "$sorted" | awk -v n="$n" 'NR == int(n * 0.95 + 0.999) { printf "%.0f", $1 * 1000 }')
  printf '%-44s %10s %8s %8s\n' "$path" "$bytes" "$p50" "$p95"
done
