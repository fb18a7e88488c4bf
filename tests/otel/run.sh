#!/usr/bin/env bash
# The span export's end-to-end tests (tests/otel, docs/opentelemetry.md) under ctest: Debian's
# python3 with psycopg and pytest, a real OTLP/HTTP receiver of the tests' own.
# Usage: run.sh ONCELY_BIN WORK_DIR [PYTEST_ARGS...]. Exit 77 (skipped) without a database, unless
# ONCELY_REQUIRE_PG says it must run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${ONCELY_PYTHON:-/usr/bin/python3}
if [ -z "${ONCELY_TEST_DATABASE_URL:-}" ]; then
  [ -n "${ONCELY_REQUIRE_PG:-}" ] && { echo "otel: ONCELY_TEST_DATABASE_URL is not set" >&2; exit 1; }
  echo "otel: skipped (no ONCELY_TEST_DATABASE_URL)" >&2
  exit 77
fi
mkdir -p "$2"
MYPYPATH="$here/../conformance:$here/../../clients/python/src" "$python" -m mypy --strict --no-error-summary \
  --cache-dir "$2/.mypy_cache" "$here"/*.py
export ONCELY_BIN=$1 PYTHONDONTWRITEBYTECODE=1
cd "$here"
exec "$python" -m pytest -q -p no:cacheprovider --basetemp "$2/tmp" -rfE "${@:3}"
