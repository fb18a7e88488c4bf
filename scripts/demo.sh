#!/usr/bin/env bash
# The README's demo: installs what is missing, builds, starts a throwaway PostgreSQL unless
# DATABASE_URL is set, then runs a payment scenario with nothing but SQL inserts
# and a configuration file (examples/demo/worker.json): a `sql` balance update that applies
# once however often it is delivered, an `exec` receipt that gets the idempotency key, and
# poison jobs that land in dead_letters. It prints what happened.
set -euo pipefail
source "$(dirname "$0")/common.sh"

echo "building the oncely CLI (the tests are built by scripts/test.sh, in the same tree)" >&2
oncely_build oncely_cli
oncely_database
cd "$ROOT"
oncely="$BUILD_DIR/src/oncely"
export ONCELY_SCHEMA=${ONCELY_SCHEMA:-oncely_demo}
export RECEIPTS_LOG=$(mktemp /tmp/oncely-receipts.XXXXXX)
sql() { psql -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" "$@"; }
count() { sql -At -c "SELECT count(*) FROM $ONCELY_SCHEMA.jobs"; }

echo "== 1. oncely migrate, and the application's own table"
sql -c "DROP SCHEMA IF EXISTS $ONCELY_SCHEMA CASCADE" -c "DROP SCHEMA IF EXISTS shop CASCADE" 2>/dev/null
"$oncely" migrate
sql -c "CREATE SCHEMA shop" -c "CREATE TABLE shop.balances (user_id bigint PRIMARY KEY, cents bigint NOT NULL)"

echo
echo "== 2. three payments arrive; the application enqueues with plain SQL INSERTs"
echo "      (every payment is sent TWICE, as a producer that retried after a timeout would)"
for round in 1 2; do
  sql <<SQL
INSERT INTO $ONCELY_SCHEMA.jobs (queue, kind, payload, idempotency_key) VALUES
  ('critical', 'update_balance', '{"user_id": 42, "cents": 10000}', 'payment-1001'),
  ('default',  'send_receipt',   '{"user_id": 42, "cents": 10000}', 'payment-1001'),
  ('critical', 'update_balance', '{"user_id": 42, "cents": 2500}',  'payment-1002'),
  ('default',  'send_receipt',   '{"user_id": 42, "cents": 2500}',  'payment-1002'),
  ('critical', 'update_balance', '{"user_id": 7,  "cents": 990}',   'payment-1003'),
  ('default',  'send_receipt',   '{"user_id": 7,  "cents": 990}',   'payment-1003');
SQL
done
echo "      ... and two poison jobs: a balance update without cents, a receipt without a user"
sql -c "INSERT INTO $ONCELY_SCHEMA.jobs (queue, kind, payload, idempotency_key) VALUES
          ('critical', 'update_balance', '{\"user_id\": 9}', 'payment-1004'),
          ('default',  'send_receipt',   '{\"cents\": 1}',   'payment-1005')"
echo "      $(count) jobs waiting"

echo
echo "== 3. oncely worker --config examples/demo/worker.json (until the queues are empty)"
"$oncely" worker --config examples/demo/worker.json 2> >(sed 's/^/      worker: /' >&2) &
worker=$!
for _ in $(seq 1 300); do [ "$(count)" = 0 ] && break; sleep 0.1; done
kill -TERM "$worker"
wait "$worker" && echo "      worker drained and exited 0 on SIGTERM"

echo
echo "== 4. what happened"
echo "-- balances (user 42 paid 10000 + 2500, user 7 paid 990: each applied once)"
sql -c "SELECT user_id, cents FROM shop.balances ORDER BY user_id"
echo "-- receipts sent by the exec handler (one per key, with the key it was given)"
sed 's/^/   /' "$RECEIPTS_LOG"
echo
echo "-- dead letters (oncely dlq list)"
"$oncely" dlq list --all
echo
echo "-- oncely stats --queue critical"
"$oncely" stats --queue critical
echo "-- oncely check (exit code 0 ok, 1 warning, 2 critical)"
"$oncely" check && echo "   exit 0"
rm -f "$RECEIPTS_LOG"
