#!/usr/bin/env bash
# Installs what is missing, builds with warnings as errors, starts a throwaway PostgreSQL
# unless DATABASE_URL is set, and runs the whole test suite. The database tests are
# required to run: a missing database fails the run instead of skipping.
set -euo pipefail
source "$(dirname "$0")/common.sh"

oncely_build -DONCELY_WARNINGS_AS_ERRORS=ON
oncely_database
export ONCELY_TEST_DATABASE_URL=$DATABASE_URL ONCELY_REQUIRE_PG=1
cd "$BUILD_DIR"
ctest --output-on-failure -j"$(nproc)" "$@"
