# Shared by demo.sh and test.sh: dependencies, build, and a Postgres to talk to.
# Sourced, not run.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR=${BUILD_DIR:-$ROOT/build}

# One build tree for the demo and the tests, configured the same way (warnings are errors,
# as in CI), so that neither rebuilds what the other built. Builds the TARGETS given, or
# everything; cmake's progress goes to stderr. Optimised, with -g1: line tables and function
# names, all that stack traces and a backtrace need, not the full debug info, which costs a
# quarter of a clean build's time (CI) in the libraries' templates.
oncely_build() {
  "$ROOT/scripts/deps.sh"
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DONCELY_WARNINGS_AS_ERRORS=ON >/dev/null
  local targets=()
  for target in "$@"; do targets+=(--target "$target"); done
  cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}" >&2
}

# Sets DATABASE_URL: the one given, or a throwaway local cluster stopped on exit.
oncely_database() {
  if [ -n "${DATABASE_URL:-}" ]; then
    echo "using the database in DATABASE_URL" >&2
    return
  fi
  LOCAL_PG_DIR=$(mktemp -d /tmp/oncely-pg.XXXXXX)
  trap '"$ROOT/scripts/local-pg.sh" stop "$LOCAL_PG_DIR"' EXIT
  DATABASE_URL=$("$ROOT/scripts/local-pg.sh" start "$LOCAL_PG_DIR")
  export DATABASE_URL LOCAL_PG_DIR
  echo "started a throwaway PostgreSQL 15 at $DATABASE_URL (data in $LOCAL_PG_DIR/data)" >&2
}
