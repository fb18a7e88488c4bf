#!/usr/bin/env bash
# The demo's "receipt service": an external effect. It gets the job's payload on stdin and
# its idempotency key in ONCELY_IDEMPOTENCY_KEY, and — like a real email or payment
# provider — sends at most one receipt per key. Exit 65 (EX_DATAERR) says "this payload can
# never work" and dead-letters the job at once; the first attempt for payment-1002 fails
# with a (simulated) mail server timeout and is retried.
set -euo pipefail
payload=$(cat)
log=${RECEIPTS_LOG:?RECEIPTS_LOG is not set}
user=$(sed -nE 's/.*"user_id": *([0-9]+).*/\1/p' <<<"$payload")
cents=$(sed -nE 's/.*"cents": *([0-9]+).*/\1/p' <<<"$payload")
if [ -z "$user" ] || [ -z "$cents" ]; then
  echo "receipt payload needs user_id and cents, got: $payload" >&2
  exit 65
fi
if [ "$ONCELY_IDEMPOTENCY_KEY" = payment-1002 ] && [ "$ONCELY_ATTEMPT" = 1 ]; then
  echo "mail server timed out" >&2  # a transient failure: any other exit status is retried
  exit 75
fi
if grep -q "key=$ONCELY_IDEMPOTENCY_KEY " "$log" 2>/dev/null; then
  exit 0  # already sent for this key: a provider with idempotency keys does the same
fi
printf 'receipt: user %s paid %s cents  key=%s attempt=%s\n' "$user" "$cents" "$ONCELY_IDEMPOTENCY_KEY" "$ONCELY_ATTEMPT" >>"$log"
