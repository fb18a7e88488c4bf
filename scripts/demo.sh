#!/usr/bin/env bash
# The README's demo: installs what is missing, builds, starts a throwaway PostgreSQL unless
# DATABASE_URL is set, then shows the schema and enqueueing from SQL and from the CLI.
# (The worker runtime that processes jobs lands in a later version; this demo says so.)
set -euo pipefail
source "$(dirname "$0")/common.sh"

oncely_build >/dev/null
oncely_database
oncely="$BUILD_DIR/src/oncely"
export ONCELY_SCHEMA=${ONCELY_SCHEMA:-oncely_demo}
sql() { psql -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" "$@"; }

echo
echo "== 1. oncely migrate (run twice: the second run finds nothing to do)"
"$oncely" migrate
"$oncely" migrate

echo
echo "== 2. a payment of 100 arrives: the application enqueues two jobs with a plain SQL INSERT"
echo "      (any language can do this; the idempotency key is the payment id)"
sql <<SQL
INSERT INTO $ONCELY_SCHEMA.jobs (queue, kind, payload, idempotency_key) VALUES
  ('critical', 'update_balance', '{"user_id": 42, "cents": 10000}', 'payment-1001'),
  ('default',  'send_receipt',   '{"user_id": 42, "payment_id": 1001}', 'payment-1001');
SQL

echo "== 3. the same through the CLI and the enqueue() SQL function (each prints the new id)"
"$oncely" enqueue send_receipt '{"user_id": 7, "payment_id": 1002}' --key payment-1002 --run-at +1m
sql -At -c "SELECT $ONCELY_SCHEMA.enqueue('update_balance', '{\"user_id\": 7, \"cents\": 500}', 'critical', 'payment-1002')"

echo
echo "== 4. bad input is refused with one line and a non-zero exit"
"$oncely" enqueue update_balance '{"cents": }' || echo "   (exit $?)"
"$oncely" migrate --schema 'x; drop table y' || echo "   (exit $?)"

echo
echo "== 5. the jobs waiting for a worker"
sql -c "SELECT id, queue, kind, payload, idempotency_key AS key, attempts,
               CASE WHEN run_at <= now() THEN 'ready' ELSE 'in ' || date_trunc('second', run_at - now()) END AS runs
          FROM $ONCELY_SCHEMA.jobs ORDER BY id"

echo "Workers that process these jobs (oncely worker) arrive with the runtime; see README."
