#!/usr/bin/env bash
# The Python client's tests under ctest (tests/CMakeLists.txt), with Debian's python3.
#   run-tests.sh unit [CACHE]    mypy --strict of the package and its tests (its cache in CACHE), then the pure tests
#   run-tests.sh install         pip installs a copy into a venv over Debian's psycopg, offline,
#                                as docs/python.md says, and imports it from there
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
  install)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp -r pyproject.toml README.md src "$work/"  # a copy: the build writes build/ and *.egg-info
    "$python" -m venv --system-site-packages "$work/venv"
    "$work/venv/bin/pip" install -q --no-build-isolation --no-index --disable-pip-version-check "$work"
    cd "$work/venv"
    bin/python -c 'import importlib.resources as r, oncely, sys
assert oncely.__file__.startswith(sys.prefix), oncely.__file__
assert r.files("oncely").joinpath("py.typed").is_file(), "py.typed is not installed"
print("installed", oncely.__version__, "at", oncely.__file__)' ;;
  pg)
    if [ -z "${ONCELY_TEST_DATABASE_URL:-}" ]; then
      [ -n "${ONCELY_REQUIRE_PG:-}" ] && { echo "python_client_pg: ONCELY_TEST_DATABASE_URL is not set" >&2; exit 1; }
      echo "python_client_pg: skipped (no ONCELY_TEST_DATABASE_URL)" >&2
      exit 77
    fi
    ONCELY_BIN=$2 exec "$python" -m pytest -q -p no:cacheprovider tests/test_pg_worker.py ;;
  *) echo "usage: run-tests.sh unit [CACHE] | install | pg ONCELY_BIN" >&2; exit 2 ;;
esac
