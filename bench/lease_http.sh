#!/usr/bin/env bash
# Lease mode with slow HTTP handlers: JOBS (1000) pre-inserted jobs of an `http` handler that
# POSTs to a local server answering each request after DELAY_S (1) second, run by ONE
# `oncely worker` process whose lease queue has CONCURRENCY (1000) handler threads:
#
#   bash bench/lease_http.sh
#   JOBS=1000 CONCURRENCY=1000 DELAY_S=1 bash bench/lease_http.sh
#
# Prints the wall time from the worker's launch until the last job's completion committed
# (its row gone), the server's first-request-to-last-response span, and the most database
# connections the worker held: pg_stat_activity sampled every 100 ms, counting the sessions
# whose application_name is the worker's own (PGAPPNAME). The server is Python's
# ThreadingHTTPServer (one thread per request, listen backlog 4096); it counts the requests
# and their distinct Idempotency-Keys, which must both be JOBS.
# DATABASE_URL, or a throwaway Postgres as bench/run.sh starts; Release build in build-bench/.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

JOBS=${JOBS:-1000}
CONCURRENCY=${CONCURRENCY:-1000}
DELAY_S=${DELAY_S:-1}
WORK=$(mktemp -d /tmp/oncely-lease-http.XXXXXX)
SCHEMA=oncely_lease_http_$$
APP=oncely_lease_http_$$
SERVER_PID="" WORKER_PID="" SCHEMA_MADE=0
cleanup() {
  set +e
  [ -z "$WORKER_PID" ] || { kill -TERM "$WORKER_PID" 2>/dev/null; wait "$WORKER_PID" 2>/dev/null; }
  [ -z "$SERVER_PID" ] || { kill -TERM "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; }
  [ "$SCHEMA_MADE" = 0 ] || psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
  bench_cleanup_local_database
  rm -rf "$WORK"
}
trap cleanup EXIT

bench_build
bench_local_database

# The server: answers every POST with 200 after DELAY_S; on SIGTERM prints
# "requests keys first_epoch last_epoch" to its stats file.
cat >"$WORK/server.py" <<'PY'
import http.server, signal, sys, threading, time
delay, port_file, stats_file = float(sys.argv[1]), sys.argv[2], sys.argv[3]
lock = threading.Lock()
keys, state = set(), {"n": 0, "first": None, "last": None}
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        now = time.time()
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with lock:
            state["n"] += 1
            keys.add(self.headers.get("Idempotency-Key"))
            if state["first"] is None: state["first"] = now
        time.sleep(delay)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
        with lock: state["last"] = time.time()
    def log_message(self, *args): pass
class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 4096
    daemon_threads = True
server = Server(("127.0.0.1", 0), Handler)
def stop(*_):
    with lock, open(stats_file, "w") as f:
        f.write("%d %d %s %s\n" % (state["n"], len(keys), state["first"] or 0, state["last"] or 0))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
with open(port_file, "w") as f: f.write(str(server.server_address[1]))
server.serve_forever()
PY
python3 "$WORK/server.py" "$DELAY_S" "$WORK/port" "$WORK/server.stats" &
SERVER_PID=$!
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done
[ -s "$WORK/port" ] || { echo "lease_http: the server did not start" >&2; exit 1; }
PORT=$(cat "$WORK/port")

cat >"$WORK/worker.json" <<JSON
{
  "shutdown_grace": "5s",
  "queues": {"hooks": {"mode": "lease", "lease": "30s", "concurrency": $CONCURRENCY, "batch_size": 1000}},
  "handlers": {"hook": {"type": "http", "url": "http://127.0.0.1:$PORT/hook", "timeout": "30s"}}
}
JSON

psql_ "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
SCHEMA_MADE=1
"$ONCELY" --schema "$SCHEMA" migrate >/dev/null
awk -v n="$JOBS" 'BEGIN { for (i = 0; i < n; i++) printf "{\"kind\":\"hook\",\"payload\":{\"id\":%d}}\n", i }' |
  "$ONCELY" --schema "$SCHEMA" enqueue - --queue hooks >/dev/null
psql_ "$DATABASE_URL" -c "CHECKPOINT"
bench_quiet_gate

say "worker: $JOBS http jobs (${DELAY_S}s each), lease queue, concurrency $CONCURRENCY"
start=$(date +%s.%N)
PGAPPNAME=$APP "$ONCELY" --schema "$SCHEMA" worker --config "$WORK/worker.json" >"$WORK/worker.log" 2>&1 &
WORKER_PID=$!
max_conn=0 left=$JOBS end=""
deadline=$((SECONDS + 120))
while ((SECONDS < deadline)); do
  read -r conn left < <(psql_ "$DATABASE_URL" -F' ' -c \
    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name = '$APP'), (SELECT count(*) FROM $SCHEMA.jobs)")
  ((conn > max_conn)) && max_conn=$conn
  if [ "$left" = 0 ]; then end=$(date +%s.%N); break; fi
  kill -0 "$WORKER_PID" 2>/dev/null || { tail -20 "$WORK/worker.log" >&2; echo "lease_http: the worker exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$end" ] || { tail -20 "$WORK/worker.log" >&2; echo "lease_http: $left jobs left after 120 s" >&2; exit 1; }
kill -TERM "$WORKER_PID"
wait "$WORKER_PID" || true
WORKER_PID=""
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || true
SERVER_PID=""
read -r requests keys first last <"$WORK/server.stats"
processed=$(psql_ "$DATABASE_URL" -c "SELECT count(*) FROM $SCHEMA.processed_jobs")
dead=$(psql_ "$DATABASE_URL" -c "SELECT count(*) FROM $SCHEMA.dead_letters")

echo
echo "oncely $(git -C "$ROOT" describe --always --dirty) on $(machine_line)"
server_line "$DATABASE_URL"
echo "command: JOBS=$JOBS CONCURRENCY=$CONCURRENCY DELAY_S=$DELAY_S bash bench/lease_http.sh"
echo
awk -v s="$start" -v e="$end" -v f="$first" -v l="$last" -v n="$JOBS" -v c="$max_conn" -v r="$requests" -v k="$keys" \
  -v p="$processed" -v d="$dead" -v delay="$DELAY_S" -v conc="$CONCURRENCY" 'BEGIN {
    printf "| %s http lease jobs (%ss each), 1 worker, concurrency %s | wall %.2f s (launch → last completion committed); server span %.2f s (first request → last response) | max %d database connections held | %d requests, %d distinct keys, %d processed markers, %d dead letters |\n",
      n, delay, conc, e - s, l - f, c, r, k, p, d }'
grep -E ' (warn|error|critical) |WARN|ERROR' "$WORK/worker.log" | head -5 >&2 || true
