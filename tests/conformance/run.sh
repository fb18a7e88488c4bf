#!/usr/bin/env bash
# The conformance suite (docs/conformance.md) under ctest: Debian's python3 with psycopg and
# pytest (scripts/deps.sh installs them). Usage: run.sh ONCELY_BIN ONCELY_TEST_WORKER MATRIX_FILE
# Exit 77 (skipped) without a database, unless ONCELY_REQUIRE_PG says it must run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${ONCELY_PYTHON:-/usr/bin/python3}
if [ -z "${ONCELY_TEST_DATABASE_URL:-}" ]; then
  [ -n "${ONCELY_REQUIRE_PG:-}" ] && { echo "conformance: ONCELY_TEST_DATABASE_URL is not set" >&2; exit 1; }
  echo "conformance: skipped (no ONCELY_TEST_DATABASE_URL)" >&2
  exit 77
fi
"$python" -c 'import psycopg, pytest, mypy' 2>/dev/null || {
  echo "conformance: $python lacks psycopg, pytest or mypy (bash scripts/deps.sh installs them)" >&2; exit 1; }
# The harness and the minimal worker are typed: checked first, strictly.
MYPYPATH="$here/../../clients/python/src" "$python" -m mypy --strict --no-error-summary --cache-dir "${3%/*}/.mypy_cache" "$here"/*.py
export ONCELY_BIN=$1 ONCELY_TEST_WORKER=$2 ONCELY_CONFORMANCE_MATRIX=$3
cd "$here"
exec "$python" -m pytest -q -p no:cacheprovider --basetemp "${3%/*}/conformance-tmp" -rfE
