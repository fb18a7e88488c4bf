# shellcheck shell=bash
# Shared by bench/run.sh, bench/scaling.sh and bench/soak.sh: the Release build, a Postgres
# to measure on, medians and number formatting. Sourced, not run; progress goes to stderr.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR=${BENCH_BUILD_DIR:-$ROOT/build-bench}
# shellcheck disable=SC2034  # used by the scripts that source this file
BENCH="$BUILD_DIR/bench/oncely_bench" ONCELY="$BUILD_DIR/src/oncely"
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

say() { echo "[bench] $*" >&2; }

# Builds oncely_bench, the oncely CLI and the delaying proxy in $BUILD_DIR (Release, no tests).
bench_build() {
  "$ROOT/scripts/deps.sh"
  say "building (Release) in $BUILD_DIR"
  local log
  log=$(mktemp /tmp/oncely-bench-build.XXXXXX)
  if ! { cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DONCELY_BUILD_TESTS=OFF &&
    cmake --build "$BUILD_DIR" -j"$(nproc)" --target oncely_bench oncely_cli oncely_chaos_proxy; } >"$log" 2>&1; then
    tail -30 "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

# Sets ONCELY: the CLI given (its path, or "" to build it), else only the CLI built in
# $BUILD_DIR (Release), for the scripts whose workers are not C++ (they need it to migrate
# and to set queues' policies).
bench_cli() {
  if [ -n "$1" ]; then
    ONCELY=$1
    return
  fi
  "$ROOT/scripts/deps.sh"
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DONCELY_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target oncely_cli >/dev/null
}

# Sets DATABASE_URL: the one given, or a throwaway cluster with the benchmark settings
# (scripts/local-pg.sh, ONCELY_PG_PROFILE=bench), stopped and deleted by bench_cleanup.
BENCH_PG_DIR=""
bench_local_database() {
  if [ -n "${DATABASE_URL:-}" ]; then
    say "using the database in DATABASE_URL"
    return
  fi
  BENCH_PG_DIR=$(mktemp -d /tmp/oncely-bench-pg.XXXXXX)
  DATABASE_URL=$(ONCELY_PG_PROFILE=bench "$ROOT/scripts/local-pg.sh" start "$BENCH_PG_DIR")
  export DATABASE_URL
  say "started PostgreSQL at $DATABASE_URL (data in $BENCH_PG_DIR)"
}

bench_cleanup_local_database() {
  if [ -n "$BENCH_PG_DIR" ]; then
    "$ROOT/scripts/local-pg.sh" stop "$BENCH_PG_DIR"
    BENCH_PG_DIR=""
  fi
}

# Waits until the machine is quiet: less than QUIET_MAX_CORES (0.15) cores busy over one
# second, from /proc/stat, so that a measurement does not start while another workload (a
# build, someone else's benchmark) runs. Gives up after QUIET_MAX_WAIT_S (180) seconds and
# says so: the measurement then runs anyway.
bench_quiet_gate() {
  local max=${QUIET_MAX_CORES:-0.15} wait_s=${QUIET_MAX_WAIT_S:-180} start=$SECONDS a b busy warned=0
  while :; do
    a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
    sleep 1
    b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
    busy=$(awk -v a="$a" -v b="$b" -v n="$(nproc)" 'BEGIN { split(a, x); split(b, y); t = y[2] - x[2]; printf "%.2f", (t > 0 ? n * (y[1] - x[1]) / t : 0) }')
    awk -v b="$busy" -v m="$max" 'BEGIN { exit !(b < m) }' && return 0
    if ((SECONDS - start >= wait_s)); then
      say "quiet gate: still $busy cores busy after ${wait_s}s; measuring anyway"
      return 0
    fi
    [ "$warned" = 1 ] || { say "quiet gate: $busy cores busy elsewhere; waiting (up to ${wait_s}s)"; warned=1; }
  done
}

psql_() { PGOPTIONS="-c client_min_messages=warning" psql -XAtq -v ON_ERROR_STOP=1 "$@"; }

# The field of a flat JSON object: field NAME JSON.
field() { sed -nE "s/.*\"$1\":(-?[0-9.eE+-]+).*/\1/p" <<<"$2"; }

# The median of the numbers given (the mean of the middle two for an even count).
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# 123456.7 -> 123,457
thousands() { printf '%.0f' "$1" | sed -E ':a; s/([0-9])([0-9]{3})($|,)/\1,\2\3/; ta'; }

# One line about the machine and one about the server, for a results header.
machine_line() {
  echo "$(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM, Linux $(uname -r)"
}
server_line() {  # server_line URL
  psql_ "$1" -F' ' -c "SELECT 'PostgreSQL ' || current_setting('server_version') || ': ' || string_agg(name || '=' || current_setting(name), ', ' ORDER BY name)
                         FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers',
                                                         'max_wal_size', 'checkpoint_timeout', 'autovacuum_naptime', 'max_connections')"
}
