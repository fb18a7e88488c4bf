#!/usr/bin/env bash
# Hostile input against the real `oncely` binary: the worker's
# configuration parser, `enqueue -`, `enqueue`, the `dlq` filters, numeric options and the
# database URL get deep JSON, 1e400, control characters and terminal escapes in names and
# values, newlines in durations, garbage timestamps and numbers, and odd URLs. For each
# refusal: exactly one line on stderr, starting "oncely: error: ", with no control
# character in it and no number of 100 digits or more; the documented exit
# code (2: bad input, 1: the database refuses or cannot be reached); no signal; nothing
# enqueued; no password echoed.
#
# usage: tests/hostile_input.sh PATH_TO_ONCELY
# Needs ONCELY_TEST_DATABASE_URL (a scratch schema is created and dropped) and psql; exits
# 77 (skipped) without them, unless ONCELY_REQUIRE_PG=1.
set -u

oncely=${1:?usage: hostile_input.sh PATH_TO_ONCELY}
url=${ONCELY_TEST_DATABASE_URL:-}
skip() {
  if [ "${ONCELY_REQUIRE_PG:-}" = 1 ]; then echo "hostile_input: $1 (ONCELY_REQUIRE_PG=1)" >&2; exit 1; fi
  echo "hostile_input: skipped: $1"
  exit 77
}
[ -n "$url" ] || skip "ONCELY_TEST_DATABASE_URL is not set"
command -v psql >/dev/null || skip "psql not found"

schema=oncely_hostile_$$
tmp=$(mktemp -d)
sql() { psql -qAtX -v ON_ERROR_STOP=1 "$url" -c "$1"; }
cleanup() {
  sql "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
export DATABASE_URL=$url ONCELY_SCHEMA=$schema
unset ONCELY_LISTEN_DATABASE_URL ONCELY_LOG_FORMAT
"$oncely" migrate >/dev/null || { echo "hostile_input: migrate failed" >&2; exit 1; }
jobs() { sql "SELECT count(*) FROM $schema.jobs"; }

failures=0
cases=0
stdin_file=/dev/null

# expect CODE NAME COMMAND... : runs COMMAND with stdin from $stdin_file and checks the
# refusal (see the top of this file). $forbidden, when set, must not appear on stderr.
expect() {
  local code=$1 name=$2
  shift 2
  cases=$((cases + 1))
  local before after rc lines problem=""
  before=$(jobs)
  timeout 60 "$@" <"$stdin_file" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  after=$(jobs)
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -ge 124 ]; then problem="ended by a signal or timed out (exit $rc)"
  elif [ "$rc" -ne "$code" ]; then problem="exit $rc, expected $code"
  elif [ "$lines" -ne 1 ] || [ "$(tail -c 1 "$tmp/err" | od -An -c | tr -d ' ')" != '\n' ]; then
    problem="stderr is not exactly one line ($lines newlines)"
  elif ! head -c 15 "$tmp/err" | grep -q '^oncely: error: '; then problem="stderr does not start with 'oncely: error: '"
  elif LC_ALL=C tr -d '\n' <"$tmp/err" | LC_ALL=C grep -q '[[:cntrl:]]'; then problem="a control character on stderr"
  elif LC_ALL=C grep -qE '[0-9]{100}' "$tmp/err"; then problem="a number of 100 digits or more on stderr"
  elif [ -n "${forbidden:-}" ] && grep -qF -- "$forbidden" "$tmp/err"; then problem="stderr shows '$forbidden'"
  elif [ "$before" != "$after" ]; then problem="jobs went from $before to $after"
  fi
  if [ -n "$problem" ]; then
    failures=$((failures + 1))
    echo "FAIL $name: $problem"
    echo "  stderr: $(head -c 400 "$tmp/err" | od -An -c | head -5 | tr -s ' ')"
  else
    echo "ok   $name: $(head -c 160 "$tmp/err")"
  fi
}

deep() { python3 -c "import sys; n=int(sys.argv[1]); sys.stdout.write(sys.argv[2]*n + '1' + sys.argv[3]*n)" "$@"; }
write() { printf '%s' "$2" >"$tmp/$1"; echo "$tmp/$1"; }

# --- the worker's configuration file (it is read before anything connects) ---
cfg() { expect 2 "config: $1" "$oncely" worker --config "$2"; }
printf '{"queues": {"q": {}}, "handlers": {"k": %s}}' "$(deep 100000 '{"a":' '}')" >"$tmp/deep.json"
cfg "a handler 100,000 objects deep" "$tmp/deep.json"
printf '{"queues": {"q": {"backoff": %s}}}' "$(deep 100000 '[' ']')" >"$tmp/deep_array.json"
cfg "a backoff 100,000 arrays deep" "$tmp/deep_array.json"
cfg "1e400" "$(write huge.json '{"queues": {"q": {"rate_limit_per_sec": 1e400}}}')"
cfg "an unknown key with an escape and a newline" "$(write esc.json '{"queues": {"q": {}}, "\u001b[31mevil\nline2": 1}')"
cfg "a queue name with an escape" "$(write qesc.json '{"queues": {"\u001b]0;x\u0007": {}}}')"
cfg "a duration with a newline" "$(write nl.json '{"queues": {"q": {"job_timeout": "5s\nrm -rf /"}}}')"
cfg "not JSON" "$(write bad.json '{"queues": {"q": {},}')"
printf '\x00\xff\x1b[2J' >"$tmp/binary.json"
cfg "binary garbage" "$tmp/binary.json"
cfg "a missing file" "$tmp/does-not-exist.json"

# --- enqueue -: one NDJSON line each ---
bulk() {
  printf '%s\n' "$2" >"$tmp/stdin"
  stdin_file=$tmp/stdin expect 2 "enqueue -: $1" "$oncely" enqueue -
}
bulk "a payload 100,000 arrays deep" "{\"kind\":\"k\",\"payload\":$(deep 100000 '[' ']')}"
bulk "a payload 100,000 objects deep" "{\"kind\":\"k\",\"payload\":$(deep 100000 '{"a":' '}')}"
bulk "priority 1e400" '{"kind":"k","priority":1e400}'
bulk "max_attempts 1e400" '{"kind":"k","max_attempts":1e400}'
bulk "an unknown field with an escape and a newline" '{"kind":"k","\u001b[31mevil\nline2":1}'
bulk "a run_at with a newline" '{"kind":"k","run_at":"+5\nrm -rf"}'
bulk "a garbage run_at" '{"kind":"k","run_at":"garbage"}'
bulk "run_at infinity" '{"kind":"k","run_at":"infinity"}'
bulk "a kind with a bell" '{"kind":"k\u0007"}'
bulk "a queue with an escape" '{"kind":"k","queue":"\u001b[2J"}'
bulk "a payload with U+0000" '{"kind":"k","payload":{"a":"\u0000"}}'
bulk "invalid UTF-8" $'{"kind":"k\xff"}'
bulk "not an object" '[1,2,3]'
bulk "a raw escape outside strings" $'{"kind":"k"}\e[31m'

# --- enqueue KIND PAYLOAD ---
one() { expect 2 "enqueue: $1" "$oncely" enqueue "${@:2}"; }
one "a payload 60,000 deep (argv holds 128 KiB)" k "$(deep 60000 '[' ']')"
one "invalid JSON" k '{"a":'
one "a payload with U+0000" k '{"a":"\u0000"}'
one "--run-at garbage" k --run-at garbage
one "--run-at with a newline" k --run-at $'+5\nX'
one "--run-at infinity" k --run-at infinity
one "--run-at year 10000" k --run-at 10000-01-01T00:00:00Z
one "--priority beyond smallint" k --priority 99999
one "a kind with an escape" $'k\e[31m'
one "a queue with a newline" k --queue $'q\nX'

# --- dlq filters ---
dlq() { expect 2 "dlq: $1" "$oncely" dlq "${@:2}"; }
dlq "--older-than with a newline" list --older-than $'5\nX'
dlq "--newer-than garbage" list --newer-than garbage
dlq "--older-than 1e400" list --older-than 1e400d
dlq "--id not a number" show --id $'1\e[31m'
dlq "--limit negative" list --limit -1
dlq "replay without a filter" replay
dlq "purge without a filter" purge
dlq "--to-queue with an escape" replay --all --to-queue $'\e[2Jq'

# --- numbers: each says what it expects (CLI11's own checks printed DBL_MAX's 309 digits) ---
num() { expect "$1" "numbers: $2" "$oncely" "${@:3}"; }
num 2 "jobs show abc" jobs show abc
num 2 "dlq show --id xyz" dlq show --id xyz
num 2 "jobs list --limit beyond 64 bits" jobs list --limit 99999999999999999999999
num 2 "enqueue --priority 1e400" enqueue k --priority 1e400
num 2 "enqueue --max-attempts 400 digits" enqueue k --max-attempts "$(printf '9%.0s' $(seq 400))"
num 3 "check --failure-rate-warning 400 digits" check --failure-rate-warning "$(printf '9%.0s' $(seq 400))"
num 2 "web --addr with a port beyond 64 bits" web --addr 127.0.0.1:99999999999999999999

# --- the database URL ---
db() { forbidden=$2 expect "$1" "url: $3" "$oncely" --database-url "$4" stats; }
db 1 'pa?ss#word' "a password with ? and # (nothing listens)" 'postgresql://u:pa?ss#word@127.0.0.1:1/db'
db 1 'S3cr@t/%20 x' "key=value, a quoted password with spaces" "host=127.0.0.1 port=1 user=u password='S3cr@t/%20 x'"
db 1 'Sup3rS3cret' "several hosts" 'postgresql://u:Sup3rS3cret@127.0.0.1:1,127.0.0.1:2/db'
db 2 '' "not a URL" 'not a url at all'
db 1 '' "a host with an escape and a newline (no such host)" $'postgresql://u@\e[31mhost\n/db'
db 2 '' "an unknown parameter" 'postgresql://u@127.0.0.1:1/db?evil=1'
db 2 '' "an unclosed IPv6 host" 'postgresql://u@[::1/db'
db 2 'S3cret' "a password in a URL libpq cannot read" 'postgresql://u:S3cret@[::1/db?evil=1'
expect 2 "schema: an escape in --schema" "$oncely" --schema $'x\e[31m' stats

echo "hostile_input: $cases cases, $failures failed"
[ "$failures" -eq 0 ]
