#!/usr/bin/env bash
# Failover to a streaming standby, with real clusters and real `oncely worker` processes on
# a multi-host URL (postgresql://127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=read-write):
#
#   sync     synchronous replication; the primary is killed (pg_ctl stop -m immediate) mid-run
#            and the standby promoted
#   async    the same with asynchronous replication: commits the standby never received are
#            lost with the old primary; each such job runs again, once, on the new primary
#   demoted  the primary stays up but becomes read-only (default_transaction_read_only, as a
#            demoted node after a cloud failover) and the standby is promoted: workers that
#            met SQLSTATE 25006 must drop their connections and find the new primary
#
# Each scenario gets a fresh primary (scripts/local-pg.sh) and a standby made by
# pg_basebackup -R, 2 worker processes serving a transaction queue and a lease queue
# (rate-limited, so the fault lands mid-run), and a keyed sql increment workload whose
# every execution is also logged (the `applied` table, no unique key: a job applied twice
# shows). Verified from the new primary alone: every job applied exactly once, nothing left
# queued, no dead letter. Figures on stdout, one JSON object per scenario:
#   {"scenario":..., "jobs":N, "lost":0, "doubled":0, "dead_letters":0,
#    "first_job_after_s": time from the fault to the first job completed on the new primary,
#    "retried": failed attempts counted (job_stats); none may be for the read-only server (the
#    workers' logs: no retry naming SQLSTATE 25006),
#    "rerun_after_lost_commit": jobs whose completion the old primary had committed but the
#    new one never received (each ran again, once)}
#
# usage: tests/failover.sh PATH_TO_ONCELY [SCENARIO...]   (default: sync async demoted)
# Needs PostgreSQL 15's server binaries (as root, the clusters run as postgres); exits 77
# (skipped) without them, unless ONCELY_REQUIRE_PG=1. FAILOVER_JOBS (default 2400) jobs per
# scenario at FAILOVER_RATE (default 150) jobs/s per queue per worker process.
set -uo pipefail

oncely=${1:?usage: failover.sh PATH_TO_ONCELY [SCENARIO...]}
shift
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(sync async demoted)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
JOBS=${FAILOVER_JOBS:-2400}
RATE=${FAILOVER_RATE:-150}
SCHEMA=oncely_failover

skip() {
  if [ "${ONCELY_REQUIRE_PG:-}" = 1 ]; then echo "failover: $1 (ONCELY_REQUIRE_PG=1)" >&2; exit 1; fi
  echo "failover: skipped: $1"
  exit 77
}
[ -x "$PGBIN/pg_basebackup" ] || skip "$PGBIN/pg_basebackup not found"


tmp=$(mktemp -d /tmp/oncely-failover.XXXXXX)
chmod 755 "$tmp"
PIDS=()
say() { echo "[failover] $*" >&2; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
psql_() { PGOPTIONS="-c client_min_messages=warning" psql -XAtq -v ON_ERROR_STOP=1 "$@"; }
now() { date +%s.%N; }
stop_cluster() { [ -f "$1/data/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$1/data" -m immediate -w stop >/dev/null 2>&1; true; }
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
  for d in "$tmp"/*/; do stop_cluster "${d%/}"; done
  [ "${FAILOVER_KEEP:-0}" = 1 ] || rm -rf "$tmp"
}
trap cleanup EXIT

# wait_for SECONDS COMMAND...: until COMMAND succeeds; false when the time is up.
wait_for() {
  local limit=$1 start=$SECONDS
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - start < limit)) || return 1
    sleep 0.1
  done
}

# A primary in $1 (local-pg.sh) that accepts replication connections, and a standby of it
# in $2 (pg_basebackup -R) on a free port of its own; sync: the primary waits for the standby.
make_pair() {
  local p=$1 s=$2 mode=$3
  "$ROOT/scripts/local-pg.sh" start "$p" >/dev/null || return 1
  echo "host replication all 127.0.0.1/32 trust" >>"$p/data/pg_hba.conf"
  as_pg "$PGBIN/pg_ctl" -D "$p/data" reload >/dev/null
  mkdir -p "$s" && chmod 700 "$s" && { [ "$(id -u)" != 0 ] || chown postgres:postgres "$s"; }
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$(cat "$p/port")" -U postgres -D "$s/data" -R -X stream -c fast \
    >"$s/basebackup.log" 2>&1 || { cat "$s/basebackup.log" >&2; return 1; }
  # The standby names itself for synchronous_standby_names.
  sed -i "s/^primary_conninfo = '/primary_conninfo = 'application_name=standby1 /" "$s/data/postgresql.auto.conf"
  if [ "$mode" = sync ]; then
    psql_ "$(url_of "$p")" -c "ALTER SYSTEM SET synchronous_standby_names = 'standby1'" -c "SELECT pg_reload_conf()" >/dev/null
  fi
  "$ROOT/scripts/local-pg.sh" serve "$s" >/dev/null || return 1
  wait_for 30 replicating "$p" || { say "the standby does not stream"; return 1; }
}
url_of() { echo "postgresql://postgres@127.0.0.1:$(cat "$1/port")/postgres"; }
replicating() {
  [ "$(psql_ "$(url_of "$1")" -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" = 1 ]
}
caught_up() {  # the standby has replayed everything the primary wrote so far
  [ "$(psql_ "$(url_of "$1")" -c "SELECT count(*) FROM pg_stat_replication WHERE replay_lsn >= pg_current_wal_lsn()")" = 1 ]
}
is_primary() { [ "$(psql_ "$1" -c "SELECT NOT pg_is_in_recovery()")" = t ]; }
applied_at_least() { [ "$(psql_ "$1" -c "SELECT count(*) FROM $SCHEMA.applied")" -ge "$2" ]; }
# $1: URL; true once the queues are empty
drained() { [ "$(psql_ "$1" -c "SELECT count(*) FROM $SCHEMA.jobs")" = 0 ]; }

run_scenario() {
  local name=$1 mode=sync p="$tmp/$1-primary" s="$tmp/$1-standby" url purl surl i t0 first reran=0
  [ "$name" = sync ] || mode=async
  say "$name: primary and standby ($mode replication)"
  make_pair "$p" "$s" "$mode" || return 1
  purl=$(url_of "$p") surl=$(url_of "$s")
  url="postgresql://postgres@127.0.0.1:$(cat "$p/port"),127.0.0.1:$(cat "$s/port")/postgres?target_session_attrs=read-write&connect_timeout=2"
  # Everything through the multi-host URL: migrate, the schema, the enqueue, the workers.
  DATABASE_URL=$url ONCELY_SCHEMA=$SCHEMA "$oncely" migrate >/dev/null || { say "migrate failed"; return 1; }
  psql_ "$url" -c "CREATE TABLE $SCHEMA.counters (key int PRIMARY KEY, n bigint NOT NULL)" \
    -c "CREATE TABLE $SCHEMA.applied (idem text NOT NULL, at timestamptz NOT NULL)"
  awk -v n="$JOBS" 'BEGIN { for (i = 1; i <= n; i++) printf "{\"kind\":\"count\",\"queue\":\"%s\",\"idempotency_key\":\"j%d\",\"payload\":{\"key\":%d,\"idem\":\"j%d\"}}\n", (i % 2 ? "tx" : "lease"), i, int(i / 50), i }' \
    >"$tmp/$name.jsonl"
  DATABASE_URL=$url ONCELY_SCHEMA=$SCHEMA "$oncely" enqueue - <"$tmp/$name.jsonl" >/dev/null || { say "enqueue failed"; return 1; }
  cat >"$tmp/$name.json" <<JSON
{"shutdown_grace": "5s",
 "queues": {"tx": {"concurrency": 2, "batch_size": 20, "poll_interval": "200ms", "rate_limit_per_sec": $RATE, "job_timeout": "10s"},
            "lease": {"mode": "lease", "lease": "5s", "concurrency": 4, "batch_size": 20, "poll_interval": "200ms",
                      "rate_limit_per_sec": $RATE, "job_timeout": "10s"}},
 "handlers": {"count": {"type": "sql", "params": ["/key", "/idem"],
   "statement": "WITH a AS (INSERT INTO $SCHEMA.applied (idem, at) VALUES (\$2, clock_timestamp())) INSERT INTO $SCHEMA.counters (key, n) VALUES (\$1, 1) ON CONFLICT (key) DO UPDATE SET n = counters.n + 1"}}}
JSON
  for i in 1 2; do
    DATABASE_URL=$url ONCELY_SCHEMA=$SCHEMA "$oncely" worker --config "$tmp/$name.json" >"$tmp/$name.worker$i.log" 2>&1 &
    PIDS+=($!)
  done
  wait_for 60 applied_at_least "$purl" $((JOBS / 4)) || { say "$name: the workers do not run"; return 1; }

  case $name in
    sync | async)
      if [ "$name" = async ]; then
        # Replication lag, as under load: the primary's WAL sender is held for 1.5 s, so
        # its last commits reach only its own disk. Released once the shutdown signal is
        # pending, it dies without sending them.
        local sender
        sender=$(psql_ "$purl" -c "SELECT pid FROM pg_stat_replication")
        say "async: holding the WAL sender (pid $sender) for 1.5 s"
        kill -STOP "$sender"
        sleep 1.5
        as_pg "$PGBIN/pg_ctl" -D "$p/data" -m immediate -w stop >/dev/null &
        local stopping=$!
        sleep 0.3
        kill -CONT "$sender"
        wait "$stopping"
      else
        # The primary dies; the standby is promoted at once (as a failover manager would).
        as_pg "$PGBIN/pg_ctl" -D "$p/data" -m immediate -w stop >/dev/null
      fi
      t0=$(now)  # it is gone
      ;;
    demoted)
      # The primary stays up, read-only; the standby catches up and takes over.
      psql_ "$purl" -c "ALTER SYSTEM SET default_transaction_read_only = on" -c "SELECT pg_reload_conf()" >/dev/null
      t0=$(now)
      wait_for 30 caught_up "$p" || { say "the standby does not catch up"; return 1; }
      ;;
  esac
  as_pg "$PGBIN/pg_ctl" -D "$s/data" -w -t 60 promote >/dev/null || { say "promote failed"; return 1; }
  wait_for 120 drained "$surl" || { say "$name: jobs left on the new primary: $(psql_ "$surl" -c "SELECT count(*) FROM $SCHEMA.jobs")"; return 1; }
  for i in "${PIDS[@]}"; do kill -TERM "$i" 2>/dev/null; done
  for i in "${PIDS[@]}"; do wait "$i" || say "$name: a worker exited $?"; done
  PIDS=()

  # From the new primary alone.
  local lost doubled dlq total retried
  read -r lost doubled dlq total retried first < <(psql_ "$surl" -F' ' -c "
    WITH expected AS (SELECT 'j' || i AS idem FROM generate_series(1, $JOBS) AS i),
         runs AS (SELECT idem, count(*) AS n FROM $SCHEMA.applied GROUP BY idem)
    SELECT (SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT FROM runs r WHERE r.idem = e.idem)),
           (SELECT count(*) FROM runs WHERE n > 1),
           (SELECT count(*) FROM $SCHEMA.dead_letters),
           (SELECT coalesce(sum(n), 0) FROM $SCHEMA.counters),
           (SELECT coalesce(sum(retried), 0) FROM $SCHEMA.job_stats),
           (SELECT round(extract(epoch FROM min(at)) - $t0, 3) FROM $SCHEMA.applied WHERE at > to_timestamp($t0))")
  if [ "$name" != demoted ]; then
    # What the old primary had committed that the new one never received: start it again
    # alone (it is a diverged timeline now) and compare.
    as_pg "$PGBIN/pg_ctl" -D "$p/data" -l "$p/postgres.log" -w -t 60 start >/dev/null 2>&1 &&
      psql_ "$purl" -c "SELECT idem || ' ' || at FROM $SCHEMA.applied ORDER BY 1" >"$tmp/$name.old" &&
      psql_ "$surl" -c "SELECT idem || ' ' || at FROM $SCHEMA.applied ORDER BY 1" >"$tmp/$name.new" &&
      reran=$(comm -23 <(sort -u "$tmp/$name.old") <(sort -u "$tmp/$name.new") | wc -l)
    # (An execution is its idem and its time: such a job ran again on the new primary, once,
    # since doubled counts every idem applied twice there.)
  fi
  if [ "$name" = demoted ] && ! grep -q "read-only" "$tmp/$name.worker1.log" "$tmp/$name.worker2.log"; then
    say "demoted: (no worker met the read-only server before the promotion)"
  fi
  echo "{\"scenario\":\"$name\",\"replication\":\"$mode\",\"jobs\":$JOBS,\"lost\":$lost,\"doubled\":$doubled,\"dead_letters\":$dlq,\"counter_sum\":$total,\"retried\":$retried,\"first_job_after_s\":${first:-null},\"rerun_after_lost_commit\":$reran}"
  local ok=0
  [ "$lost" = 0 ] && [ "$doubled" = 0 ] && [ "$dlq" = 0 ] && [ "$total" = "$JOBS" ] && ok=1
  # A read-only server is no job's failure: no attempt may be charged for it.
  local charged
  charged=$(cat "$tmp/$name".worker*.log | grep -E "job (retry|dead-lettered)|its completion failed" | grep -c -E "25006|read-only")
  if [ "$charged" != 0 ]; then ok=0; say "$name: $charged attempts charged as failures for a read-only server"; fi
  stop_cluster "$p"
  stop_cluster "$s"
  [ "$ok" = 1 ] || { say "$name: FAILED (lost $lost, doubled $doubled, dead letters $dlq, counters $total of $JOBS)"; tail -5 "$tmp/$name.worker1.log" >&2; return 1; }
}

kill_workers() {
  local pid
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
  PIDS=()
}
failed=0
for scenario in "${scenarios[@]}"; do
  case $scenario in
    sync | async | demoted) run_scenario "$scenario" || failed=1; kill_workers ;;
    *) echo "failover: unknown scenario $scenario (sync, async, demoted)" >&2; exit 2 ;;
  esac
done
exit $failed
