#!/usr/bin/env bash
# The database tests once more, through a local PgBouncer in transaction mode (Debian's
# 1.18) with a pool smaller than a worker's default concurrency (3 server connections,
# 4 threads), the way docs/operations.md ("Behind PgBouncer") says to run: the job path
# pooled, prepared statements off (ONCELY_PREPARED_STATEMENTS=0), the LISTEN connection
# (and with it the attempt records) direct. Then a check that nothing leaked into the
# pool: on each of its server connections, no prepared statement, no advisory lock, no
# LISTEN.
#
# usage: tests/pgbouncer.sh PATH_TO_oncely_pg_tests [DOCTEST_OPTION...]
#   (options such as -tc='handlers: *' narrow the run, for a look at one test)
# Needs ONCELY_TEST_DATABASE_URL (the server, direct), pgbouncer and psql; exits 77
# (skipped) without them, unless ONCELY_REQUIRE_PGBOUNCER=1 (scripts/test.sh, CI).
set -u

tests=${1:?usage: pgbouncer.sh PATH_TO_oncely_pg_tests [DOCTEST_OPTION...]}
shift
direct=${ONCELY_TEST_DATABASE_URL:-}
pgbouncer=${ONCELY_PGBOUNCER:-/usr/sbin/pgbouncer}
pool_size=3
skip() {
  if [ "${ONCELY_REQUIRE_PGBOUNCER:-}" = 1 ]; then echo "pgbouncer: $1 (ONCELY_REQUIRE_PGBOUNCER=1)" >&2; exit 1; fi
  echo "pgbouncer: skipped: $1"
  exit 77
}
[ -n "$direct" ] || skip "ONCELY_TEST_DATABASE_URL is not set"
[ -x "$pgbouncer" ] || skip "$pgbouncer not found (apt-get install pgbouncer)"
command -v psql >/dev/null || skip "psql not found"

# Excluded, by what they need that a transaction-mode pooler does not give:
#  - the pooler tests themselves: each starts a PgBouncer of its own in front of the server;
#  - tests that kill or count the server's backends of a connection (pg_terminate_backend
#    of the worker's backends, the client's reconnect after its backend is killed, the
#    backend pid a connection reports): through the pool a client connection has no
#    backend of its own;
#  - tests of the connection budget against max_connections: behind a pooler the worker
#    skips that check (client connections are not server connections);
#  - tests that hold a transaction of their own open while a worker must go on (a row
#    lock, an open transaction in the test): with 3 server connections such a test can
#    take one the worker's threads wait for, by design of the test, not of the worker;
#  - tests that prepare or LISTEN on the test's own connection by design: the claim probes
#    (claim_pgtest.cpp EXPLAINs the claim as a named prepared statement of its own, which
#    stays on a server connection of the pool), the sql start-up check's "with prepared
#    statements" case, the one-notification-per-INSERT test and the wake-up window's
#    tests of the trigger and of the listener (they LISTEN);
#  - tests that connect as roles they create (sql_checks' permission-denied case, the roles
#    tests' login roles, the protocol's worker that may not write policies, the viewer of
#    completed jobs): the pooler's
#    auth file lists only the test user;
#  - the idle-wake-up latency test (median under 50 ms, measured for a direct connection);
#  - the limits' tests that LISTEN or hold transactions of their own (the slot-freed NOTIFY,
#    what the limits hold back, a claim waiting for a slot, found by its backend's pid);
#    their worker tests are in oncely_pg_serial_tests;
#  - tests that restart the server are in oncely_pg_serial_tests, not run here.
excluded='*pooler*'
excluded+=',*terminate*,*backend*,*than the server allows*,*max_connections*,*partition*'
excluded+=',claim: *,*start-up check works without prepared statements*,*sends exactly one notification*'
excluded+=',*permission-denied*,*idle worker starts a freshly inserted job*,*enqueue returns ids in order*'
excluded+=',roles: *,*skips its NOTIFY while one*,*the listener acknowledges*,*may not write policies*'
excluded+=",*wakes the queue's workers at commit*,*what the limits hold back*,*waits for the queue's slot before*"
excluded+=",*the viewer role reads completed jobs*"

read -r host port dbname user < <(psql -qAtX "$direct" -c \
  "SELECT coalesce(inet_server_addr()::text, '127.0.0.1'), current_setting('port'), current_database(), current_user" \
  | tr '|' ' ') || { echo "pgbouncer: cannot reach $direct" >&2; exit 1; }
host=${host%/32}
dir=$(mktemp -d /tmp/oncely-pgbouncer.XXXXXX)
chmod 755 "$dir"
[ "$(id -u)" = 0 ] && chown postgres "$dir"  # it runs as postgres (it refuses root) and writes its log here
cleanup() {
  [ -f "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
echo "\"$user\" \"\"" > "$dir/users.txt"
write_config() {
cat > "$dir/pgbouncer.ini" <<EOF
[databases]
$dbname = host=$host port=$port dbname=$dbname user=$user
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $listen_port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = $pool_size
max_db_connections = $pool_size
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 2000
admin_users = $user
ignore_startup_parameters = extra_float_digits,options
log_connections = 0
log_disconnections = 0
logfile = $dir/pgbouncer.log
$( [ "$(id -u)" = 0 ] && echo "user = postgres" )
EOF
chmod 644 "$dir/users.txt" "$dir/pgbouncer.ini"
}
# A random port can be taken by the time pgbouncer binds it (other tests start servers
# too), so a start that fails is tried again on another port. Only pgbouncer's admin
# console answers SHOW VERSION: a foreign server on the port is never taken for ours.
started=0
for attempt in $(seq 10); do
  listen_port=$((24500 + RANDOM % 400))  # below the kernel's ephemeral range (client ports)
  write_config
  rm -f "$dir/pgbouncer.log"
  "$pgbouncer" -q "$dir/pgbouncer.ini" &
  echo $! > "$dir/pid"
  for _ in $(seq 100); do
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
    if psql -qAtX "postgresql://$user@127.0.0.1:$listen_port/pgbouncer" -c "SHOW VERSION" >/dev/null 2>&1; then
      started=1
      break
    fi
    sleep 0.1
  done
  [ "$started" = 1 ] && break
  kill "$(cat "$dir/pid")" 2>/dev/null || true
  wait "$(cat "$dir/pid")" 2>/dev/null || true
  echo "pgbouncer: start $attempt on port $listen_port failed: $(grep -sE 'FATAL|ERROR|WARNING' "$dir/pgbouncer.log" | tail -2)" >&2
done
pooled="postgresql://$user@127.0.0.1:$listen_port/$dbname"
[ "$started" = 1 ] && psql -qAtX "$pooled" -c "SELECT 1" >/dev/null || {
  echo "pgbouncer did not start:" >&2; cat "$dir/pgbouncer.log" >&2; exit 1; }
echo "pgbouncer: transaction mode, pool of $pool_size, at $pooled (LISTEN direct at $direct)"

status=0
start=$(date +%s)
ONCELY_TEST_DATABASE_URL=$pooled ONCELY_TEST_DIRECT_DATABASE_URL=$direct ONCELY_LISTEN_DATABASE_URL=$direct \
  ONCELY_PREPARED_STATEMENTS=0 ONCELY_TEST_PGDATA= ONCELY_TEST_POOL_SIZE=$pool_size \
  "$tests" --test-case-exclude="$excluded" --no-intro=true "$@" || status=1
echo "pgbouncer: the suite took $(( $(date +%s) - start )) s through the pooler"

# Nothing left on the pool's server connections: as many clients as the pool has server
# connections, each in a transaction at once (so each holds a different one), look at
# their own session.
leaks=0
for i in $(seq "$pool_size"); do
  psql -qAtX -v ON_ERROR_STOP=1 "$pooled" > "$dir/check.$i" 2>&1 <<'EOF' &
BEGIN;
SELECT pg_backend_pid(),
       (SELECT count(*) FROM pg_prepared_statements),
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
       (SELECT count(*) FROM pg_listening_channels());
SELECT pg_sleep(2);
COMMIT;
EOF
done
wait_for_checks() { for job in $(jobs -p); do [ "$job" = "$(cat "$dir/pid")" ] || wait "$job"; done; }
wait_for_checks
pids=""
for i in $(seq "$pool_size"); do
  line=$(grep '|' "$dir/check.$i" | head -1)
  IFS='|' read -r pid prepared advisory listening <<< "$line"
  if [ -z "$line" ]; then echo "pgbouncer: leak check $i failed: $(cat "$dir/check.$i")" >&2; leaks=1; continue; fi
  pids+="$pid "
  if [ "$prepared" != 0 ] || [ "$advisory" != 0 ] || [ "$listening" != 0 ]; then
    echo "pgbouncer: server connection $pid kept $prepared prepared statement(s), $advisory advisory lock(s)," \
         "$listening LISTEN channel(s)" >&2
    leaks=1
  fi
done
distinct=$(echo "$pids" | tr ' ' '\n' | grep -c . | tr -d ' ')
echo "pgbouncer: checked server connections: $pids"
[ "$(echo "$pids" | tr ' ' '\n' | grep . | sort -u | wc -l)" = "$distinct" ] || { echo "pgbouncer: the checks shared a server connection" >&2; leaks=1; }
[ "$leaks" = 0 ] && echo "pgbouncer: nothing leaked on the pool's server connections"
[ "$status" = 0 ] && [ "$leaks" = 0 ]
