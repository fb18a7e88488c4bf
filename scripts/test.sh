#!/usr/bin/env bash
# Installs what is missing, builds with warnings as errors, starts a throwaway PostgreSQL
# unless DATABASE_URL is set, and runs the whole test suite. The database tests are
# required to run: a missing database fails the run instead of skipping.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# The fuzz targets must build and run here, never skip (clang comes from deps.sh).
export ONCELY_REQUIRE_FUZZERS=1
oncely_build
oncely_database
export ONCELY_TEST_DATABASE_URL=$DATABASE_URL ONCELY_REQUIRE_PG=1
# deps.sh installs promtool: the alerting-rule tests must run too, never skip.
export ONCELY_REQUIRE_PROMTOOL=1
# And pgbouncer: the suite's run through a transaction-mode pooler must run too.
export ONCELY_REQUIRE_PGBOUNCER=1
# Our own throwaway cluster may be restarted by the tests (worker recovery after a restart).
if [ -n "${LOCAL_PG_DIR:-}" ]; then export ONCELY_TEST_PGDATA=$LOCAL_PG_DIR/data; fi
cd "$BUILD_DIR"
ctest --output-on-failure -j"$(nproc)" "$@"
