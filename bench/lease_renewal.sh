#!/usr/bin/env bash
# Lease mode: what holding leases costs, and how soon a killed worker's jobs run again.
#
#   bash bench/lease_renewal.sh
#   JOBS=1000 LEASE=3s WINDOW_S=20 bash bench/lease_renewal.sh
#
# 1. Worker A (`oncely worker`, one lease queue, concurrency and batch_size JOBS, lease LEASE)
#    takes JOBS pre-inserted jobs of an `exec` handler that logs its start and sleeps 60 s.
# 2. Renewal cost: once A holds all JOBS leases, over WINDOW_S (20) seconds: the renewal
#    statement's calls and server execution time from pg_stat_statements (needs
#    shared_preload_libraries = 'pg_stat_statements'; without it only the transaction count is
#    reported), and the database's committed transactions (pg_stat_database.xact_commit, which
#    counts every session, this script's own included).
# 3. Reclaim: worker B (same config) is started and idle; A is killed with SIGKILL; each job's
#    reclaim time is the time from the kill until B's handler for it started (its log line),
#    reported as p50/p95/max against the lease.
# DATABASE_URL, or a throwaway Postgres as bench/run.sh starts (without pg_stat_statements).
# KEEP_LOGS=DIR keeps both workers' logs and start files there.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

JOBS=${JOBS:-1000}
LEASE=${LEASE:-3s}
WINDOW_S=${WINDOW_S:-20}
WORK=$(mktemp -d /tmp/oncely-lease-renewal.XXXXXX)
chmod 755 "$WORK"
SCHEMA=oncely_lease_renewal_$$
A_PID="" B_PID="" SCHEMA_MADE=0
cleanup() {
  set +e
  for pid in $A_PID $B_PID; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  [ -z "${KEEP_LOGS:-}" ] || { mkdir -p "$KEEP_LOGS" && cp "$WORK"/*.log "$WORK"/*.starts "$KEEP_LOGS"/; }
  [ "$SCHEMA_MADE" = 0 ] || psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
  bench_cleanup_local_database
  rm -rf "$WORK"
}
trap cleanup EXIT

bench_build
bench_local_database

# STARTS (the worker's variable, passed on by `env`) names the file each start is appended to:
# "job_id epoch_seconds" (one short O_APPEND write per job: lines do not interleave).
cat >"$WORK/worker.json" <<JSON
{
  "shutdown_grace": "1s",
  "queues": {"sleepers": {"mode": "lease", "lease": "$LEASE", "concurrency": $JOBS, "batch_size": $((JOBS < 1000 ? JOBS : 1000)), "job_timeout": "5m"}},
  "handlers": {"sleep": {"type": "exec", "env": {"STARTS": "\${STARTS}"},
                         "command": ["/bin/sh", "-c", "echo \"\$ONCELY_JOB_ID \$(date +%s.%N)\" >>\"\$STARTS\"; exec sleep 60"]}}
}
JSON

psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
SCHEMA_MADE=1
"$ONCELY" --schema "$SCHEMA" migrate >/dev/null
awk -v n="$JOBS" 'BEGIN { for (i = 0; i < n; i++) printf "{\"kind\":\"sleep\",\"payload\":{\"id\":%d}}\n", i }' |
  "$ONCELY" --schema "$SCHEMA" enqueue - --queue sleepers >/dev/null
stmts=0
[ "$(psql_ "$DATABASE_URL" -c "SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'")" = 1 ] &&
  psql_ "$DATABASE_URL" -c "SELECT pg_stat_statements_reset()" >/dev/null 2>&1 && stmts=1

lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
wait_lines() {  # wait_lines FILE N TIMEOUT_S
  local deadline=$((SECONDS + $3))
  while (($(lines "$1") < $2)); do
    ((SECONDS < deadline)) || { echo "lease_renewal: $(lines "$1") of $2 starts in $1 after $3 s" >&2; exit 1; }
    sleep 0.05
  done
}

say "worker A: $JOBS exec jobs (sleep 60), lease $LEASE"
STARTS=$WORK/a.starts "$ONCELY" --schema "$SCHEMA" worker --config "$WORK/worker.json" >"$WORK/a.log" 2>&1 &
A_PID=$!
wait_lines "$WORK/a.starts" "$JOBS" 60
a_span=$(awk 'NR == 1 || $2 < lo { lo = $2 } NR == 1 || $2 > hi { hi = $2 } END { printf "%.2f", hi - lo }' "$WORK/a.starts")
sleep 2  # past the first renewal of the last claim

# ---- renewal cost ----
renew_stats() {
  if [ "$stmts" = 1 ]; then
    psql_ "$DATABASE_URL" -F' ' -c "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0), coalesce(sum(rows), 0)
                                      FROM pg_stat_statements WHERE query LIKE '%durations AS%' AND query LIKE '%UPDATE%'"
  else
    echo "0 0 0"
  fi
}
xacts() { psql_ "$DATABASE_URL" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
read -r c0 t0 r0 < <(renew_stats)
x0=$(xacts)
s0=$(date +%s.%N)
sleep "$WINDOW_S"
read -r c1 t1 r1 < <(renew_stats)
x1=$(xacts)
s1=$(date +%s.%N)
held=$(psql_ "$DATABASE_URL" -c "SELECT count(*) FROM $SCHEMA.jobs WHERE lease_token IS NOT NULL AND run_at > now()")

# ---- reclaim after kill -9 ----
say "worker B started idle; kill -9 worker A"
STARTS=$WORK/b.starts "$ONCELY" --schema "$SCHEMA" worker --config "$WORK/worker.json" >"$WORK/b.log" 2>&1 &
B_PID=$!
sleep 3  # B connected and polling (it finds nothing: A holds every job)
[ "$(lines "$WORK/b.starts")" = 0 ] || {
  grep -E 'WARN|ERROR|warn|error' "$WORK/a.log" | head -5 >&2; grep -E 'WARN|ERROR|warn|error' "$WORK/b.log" | head -5 >&2
  echo "lease_renewal: worker B took $(lines "$WORK/b.starts") jobs A held ($held live leases before B started)" >&2; exit 1; }
killed=$(date +%s.%N)
kill -KILL "$A_PID"
wait "$A_PID" 2>/dev/null || true
A_PID=""
wait_lines "$WORK/b.starts" "$JOBS" 120
dups=$(cut -d' ' -f1 "$WORK/b.starts" | sort | uniq -d | wc -l)
awk -v k="$killed" '{ print $2 - k }' "$WORK/b.starts" | sort -g >"$WORK/reclaim"
pct() { awk -v p="$1" '{ v[NR] = $1 } END { i = int(p * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.2f", v[i] }' "$WORK/reclaim"; }
p50=$(pct 0.50) p95=$(pct 0.95) pmax=$(pct 1) pmin=$(pct 0)

echo
echo "oncely $(git -C "$ROOT" describe --always --dirty) on $(machine_line)"
server_line "$DATABASE_URL"
echo "command: JOBS=$JOBS LEASE=$LEASE WINDOW_S=$WINDOW_S bash bench/lease_renewal.sh"
echo
awk -v c="$((c1 - c0))" -v t0="$t0" -v t1="$t1" -v r="$((r1 - r0))" -v x="$((x1 - x0))" -v s0="$s0" -v s1="$s1" \
  -v n="$JOBS" -v held="$held" -v lease="$LEASE" -v stmts="$stmts" 'BEGIN {
    w = s1 - s0
    if (stmts == 1 && c > 0)
      printf "| renewal, %d leases held (lease %s), %.0f s window | %.2f renewal statements/s, %.0f rows renewed/s; server time %.2f ms per statement, %.2f ms/s (%.2f ms/s per 1,000 leases) | %.1f committed transactions/s in the database (every session) | %d leases live at the end |\n",
        n, lease, w, c / w, r / w, (t1 - t0) / c, (t1 - t0) / w, (t1 - t0) / w * 1000 / n, x / w, held
    else
      printf "| renewal, %d leases held (lease %s), %.0f s window | pg_stat_statements not available | %.1f committed transactions/s in the database (every session) | %d leases live at the end |\n",
        n, lease, w, x / w, held
  }'
echo "| reclaim after kill -9 of the worker holding $JOBS leases (lease $LEASE; an idle second worker) | kill → handler start on the second worker: min $pmin s, p50 $p50 s, p95 $p95 s, max $pmax s | $(lines "$WORK/b.starts") starts on B, $dups jobs started more than once there; $(grep -c 'lease lost' "$WORK/b.log" || true) 'lease lost' lines in B's log; A started its $JOBS jobs within $a_span s |"
