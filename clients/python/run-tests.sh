#!/usr/bin/env bash
# The Python client's tests under ctest (tests/CMakeLists.txt), with Debian's python3.
#   run-tests.sh unit [CACHE]    mypy --strict of the package and its tests (its cache in CACHE), then the pure tests
#   run-tests.sh pg ONCELY_BIN   the tests against PostgreSQL (ONCELY_TEST_DATABASE_URL);
#                                exit 77 (skipped) without one, unless ONCELY_REQUIRE_PG is set
set -euo pipefail
cd "$(dirname "$0")"
python=${ONCELY_PYTHON:-/usr/bin/python3}
export PYTHONDONTWRITEBYTECODE=1  # nothing written into the source tree
case ${1:-} in
  unit)
    MYPYPATH=src "$python" -m mypy --strict --no-error-summary --cache-dir "${2:-/dev/null}" src/oncely tests
    exec "$python" -m pytest -q -p no:cacheprovider --ignore tests/test_pg_worker.py ;;
  pg)
    if [ -z "${ONCELY_TEST_DATABASE_URL:-}" ]; then
      [ -n "${ONCELY_REQUIRE_PG:-}" ] && { echo "python_client_pg: ONCELY_TEST_DATABASE_URL is not set" >&2; exit 1; }
      echo "python_client_pg: skipped (no ONCELY_TEST_DATABASE_URL)" >&2
      exit 77
    fi
    ONCELY_BIN=$2 exec "$python" -m pytest -q -p no:cacheprovider tests/test_pg_worker.py ;;
  *) echo "usage: run-tests.sh unit | pg ONCELY_BIN" >&2; exit 2 ;;
esac
