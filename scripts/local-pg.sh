#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster for the demo, the tests and CI.
#
#   scripts/local-pg.sh start DIR   initdb a fresh cluster in DIR (wiped first), start it,
#                                   print the DATABASE_URL to use on stdout
#   scripts/local-pg.sh stop DIR    fast shutdown, then remove DIR
#   scripts/local-pg.sh url DIR     print the URL of the running cluster in DIR
#   scripts/local-pg.sh serve DIR   start the existing data directory DIR/data on a free port
#                                   (a standby made by pg_basebackup), print its URL
#
# ONCELY_PG_PROFILE=bench uses the benchmarks' memory and checkpoint settings
# (shared_buffers 1GB, max_wal_size 8GB, checkpoint_timeout 15min); durability is the same.
#
# Listens on 127.0.0.1 (a free port from 25432 up) and on a Unix socket inside DIR, trust
# authentication for local connections only. Durability stays on (fsync, synchronous_commit,
# full_page_writes). Started as root, the server runs as the `postgres` OS user.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|url|serve DIR" >&2; exit 2; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

url_of() { echo "postgresql://postgres@127.0.0.1:$(cat "$1/port")/postgres"; }

start() {
  [ -x "$PGBIN/initdb" ] || { echo "local-pg: $PGBIN/initdb not found (apt-get install postgresql-15)" >&2; exit 1; }
  if [ -f "$dir/data/postmaster.pid" ]; then stop; fi
  rm -rf "$dir"
  mkdir -p "$dir/data"
  chmod 700 "$dir" "$dir/data"
  [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$dir"
  as_pg "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  cat >>"$dir/data/postgresql.conf" <<CONF

# ---- oncely local cluster (scripts/local-pg.sh) ----
listen_addresses = '127.0.0.1'
include_if_exists = 'oncely-port.conf'
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = 256MB
# durability as in production (these are the defaults, stated for the record)
fsync = on
synchronous_commit = on
full_page_writes = on
max_wal_size = 4GB
autovacuum_naptime = 10s
CONF
  if [ "${ONCELY_PG_PROFILE:-}" = bench ]; then
    cat >>"$dir/data/postgresql.conf" <<CONF
shared_buffers = 1GB
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 15min
CONF
  fi
  cat >"$dir/data/pg_hba.conf" <<HBA
local all all trust
host  all all 127.0.0.1/32 trust
HBA
  serve
}

# Starts DIR/data on the first free port from 25432, below the kernel's ephemeral range
# (32768-60999 on Linux): a port inside it can be any client connection's local port, and a
# server cannot bind a port a client socket holds. A port taken between the probe and the
# bind (another test starting a server) moves the start to the next port. The port lives in
# its own file, so a standby copied from this cluster takes the include and gets its own.
serve() {
  local port=25432
  [ -d "$dir/data" ] || { echo "local-pg: no data directory in $dir" >&2; exit 1; }
  grep -q "^unix_socket_directories = '$dir'" "$dir/data/postgresql.conf" ||
    printf "include_if_exists = 'oncely-port.conf'\nunix_socket_directories = '%s'\n" "$dir" >>"$dir/data/postgresql.conf"
  while :; do
    while port_in_use "$port"; do port=$((port + 1)); done
    [ "$port" -lt 25632 ] || { echo "local-pg: no free port in 25432-25631" >&2; exit 1; }
    echo "port = $port" >"$dir/data/oncely-port.conf"
    echo "$port" >"$dir/port"
    rm -f "$dir/postgres.log"
    if as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null; then
      url_of "$dir"
      return
    fi
    grep -q "Address already in use" "$dir/postgres.log" 2>/dev/null || { tail -20 "$dir/postgres.log" >&2; exit 1; }
    port=$((port + 1))
  done
}

stop() {
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  url) url_of "$dir" ;;
  serve) serve ;;
  *) echo "usage: $0 start|stop|url|serve DIR" >&2; exit 2 ;;
esac
