// Restarting the server breaks every other test's connections: these tests live in their
// own binary, run alone (RUN_SERIAL in tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

// The data directory of the cluster the tests may restart, or null (with a message) when
// the server is not ours (DATABASE_URL was given): restarting it is not ours to do. In CI,
// scripts/test.sh starts its own cluster, so the tests must run there.
const char* own_cluster() {
  const char* pgdata = std::getenv("ONCELY_TEST_PGDATA");
  if (pgdata != nullptr && *pgdata != '\0') return pgdata;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") FAIL("CI=true but ONCELY_TEST_PGDATA is not set");
  MESSAGE("ONCELY_TEST_PGDATA is not set (not our own cluster): not restarting the server");
  return nullptr;
}

// pg_ctl restart -m fast, waiting until the server accepts connections again.
bool restart_server(const std::string& pgdata) {
  const std::string as_postgres = geteuid() == 0 ? "runuser -u postgres -- " : "";
  const std::string restart = as_postgres + "/usr/lib/postgresql/15/bin/pg_ctl -D '" + pgdata + "' -l '" + pgdata +
                              "/../postgres.log' restart -m fast -w -t 60 >/dev/null 2>&1";
  return std::system(restart.c_str()) == 0;
}

// Once `applied` cents are in, restarts the server; then every one of `jobs` jobs must be
// applied exactly once, the worker having noticed and recovered by itself.
void restart_mid_run(PgFixture& db, WorkerProcess& worker, const std::string& pgdata, long applied, long jobs) {
  REQUIRE(wait_until([&] { return sum_of_balances(db) >= applied; }, 30s));
  REQUIRE(restart_server(pgdata));
  REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 90s));
  worker.process->signal(SIGTERM);
  const ProcessResult r = worker.process->wait();
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("reconnecting") != std::string::npos);  // it did notice
  CHECK(sum_of_balances(db) == jobs);
  CHECK(count_of(db, "processed_jobs") == jobs);
  CHECK(count_of(db, "dead_letters") == 0);
}

}  // namespace

TEST_SUITE("restart") {
  TEST_CASE("restart: a Postgres restart mid-run: the worker recovers by itself and sums are exact") {
    const char* pgdata = own_cluster();
    if (pgdata == nullptr) return;
    PgFixture db;
    create_balances(db);
    constexpr int kJobs = 5000;
    enqueue_increments(db, kJobs);
    WorkerProcess worker(db,
                         R"({"queues": {"default": {"concurrency": 2, "batch_size": 20, "poll_interval": "100ms"}}})");
    restart_mid_run(db, worker, pgdata, 500, kJobs);
  }

  TEST_CASE("restart: a Postgres restart while lease jobs run: each job's effect applied exactly once") {
    const char* pgdata = own_cluster();
    if (pgdata == nullptr) return;
    PgFixture db;
    create_balances(db);
    constexpr int kJobs = 40;
    // 1.5 s handlers on a lease queue: the restart lands while leases are held and renewed.
    db.exec("INSERT INTO " + db.table("jobs") +
            " (queue, kind, idempotency_key, payload) SELECT 'long', 'lease_increment', 'r-' || i,"
            " jsonb_build_object('account', i % 10, 'cents', 1, 'sleep_ms', 1500) FROM generate_series(1, " +
            std::to_string(kJobs) + ") AS i");
    WorkerProcess worker(db, R"({"queues": {"long": {"mode": "lease", "lease": "3s", "concurrency": 10,
      "poll_interval": "100ms"}}})");
    restart_mid_run(db, worker, pgdata, 5, kJobs);
  }

  TEST_CASE("restart: a Postgres restart mid-batch: the batch's counts are exact and its callback runs once") {
    const char* pgdata = own_cluster();
    if (pgdata == nullptr) return;
    PgFixture db;
    create_balances(db);
    constexpr int kMembers = 3000;
    // The callback credits account 1000 with a million cents: once, or the sum says how often.
    const auto batch =
        db.scalar<long>("SELECT " + db.table("open_batch") +
                        R"((on_finish => '{"kind": "increment", "payload": {"account": 1000, "cents": 1000000}}'))");
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, idempotency_key, payload, batch_id) SELECT 'increment', 'k-' || i,"
            " jsonb_build_object('account', i % 100, 'cents', 1), " +
            std::to_string(batch) + " FROM generate_series(1, " + std::to_string(kMembers) + ") AS i");
    db.exec("SELECT " + db.table("close_batch") + "(" + std::to_string(batch) + ")");
    WorkerProcess worker(db,
                         R"({"queues": {"default": {"concurrency": 2, "batch_size": 20, "poll_interval": "100ms"}}})");
    REQUIRE(wait_until([&] { return sum_of_balances(db) >= 300; }, 30s));
    REQUIRE(restart_server(pgdata));
    REQUIRE(
        wait_until([&] { return count_of(db, "jobs") == 0 && count_of(db, "processed_jobs") == kMembers + 1; }, 90s));
    worker.process->signal(SIGTERM);
    const ProcessResult r = worker.process->wait();
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("reconnecting") != std::string::npos);  // the restart landed mid-batch
    CHECK(sum_of_balances(db) == kMembers + 1000000);
    CHECK(db.scalar<std::string>("SELECT format('%s %s %s', completed, dead, cardinality(callback_job_ids)) "
                                 "FROM " +
                                 db.table("batches")) == std::to_string(kMembers) + " 0 1");
  }

}  // TEST_SUITE
