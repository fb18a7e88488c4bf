// Limits across workers with real worker processes: three C++ lease workers of concurrency
// 10 each share a queue whose limits the database enforces at the claim (migration 22).
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

struct ThreeWorkers {
  PgFixture db;
  std::vector<std::unique_ptr<WorkerProcess>> workers;

  explicit ThreeWorkers(const std::string& limits) {
    create_balances(db);
    db.exec("CREATE TABLE " + db.table("lease_runs") +
            " (id bigserial PRIMARY KEY, job_id bigint, key text, attempt int, pid int,"
            "  started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz)");
    const std::string config = R"({"shutdown_grace": "1s", "queues": {"default": {"mode": "lease", "lease": "30s",
      "concurrency": 10, "poll_interval": "100ms", "limits": )" +
                               limits + "}}}";
    for (int i = 0; i < 3; ++i) workers.push_back(std::make_unique<WorkerProcess>(db, config));
  }

  ~ThreeWorkers() {
    for (auto& w : workers) w->process->signal(SIGTERM);
    for (auto& w : workers) w->process->wait();
  }

  /// `n` lease_increment jobs of `sleep_ms`, the account (their key under "/account") i % accounts;
  /// their idempotency key "aACCOUNT-i" names the account in lease_runs.
  void enqueue(int n, int accounts, int sleep_ms) {
    const std::string account = "(i % " + std::to_string(accounts) + ")";
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, idempotency_key, payload) SELECT 'lease_increment', 'a' || " +
            account + " || '-' || i, jsonb_build_object('account', " + account +
            ", 'cents', 1, 'record', true, 'sleep_ms', " + std::to_string(sleep_ms) + ") FROM generate_series(1, " +
            std::to_string(n) + ") AS i");
  }

  /// Live leases now: the queue's, and the most of one key.
  std::pair<long, long> running() {
    const auto row =
        db.exec("SELECT coalesce(sum(n), 0)::bigint, coalesce(max(n), 0)::bigint FROM (SELECT count(*) AS n FROM " +
                db.table("jobs") + " WHERE lease_token IS NOT NULL AND run_at > now() GROUP BY concurrency_key) k")[0];
    return {row[0].as<long>(), row[1].as<long>()};
  }

  /// Samples running() every 50 ms until no job is left (or `timeout`); the most seen.
  std::pair<long, long> watch_until_done(std::chrono::seconds timeout) {
    long most = 0;
    long most_of_a_key = 0;
    const bool done = wait_until(
        [&] {
          const auto [all, of_a_key] = running();
          most = std::max(most, all);
          most_of_a_key = std::max(most_of_a_key, of_a_key);
          std::this_thread::sleep_for(40ms);
          return db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0;
        },
        timeout);
    REQUIRE(done);
    return {most, most_of_a_key};
  }
};

}  // namespace

TEST_SUITE("queue limits") {
  TEST_CASE("three workers of concurrency 10 under a limit of 4: never more than 4 running, and 4 reached") {
    ThreeWorkers q(R"({"concurrency": 4})");
    q.enqueue(24, 24, 500);
    const auto [most, most_of_a_key] = q.watch_until_done(60s);
    CHECK(most <= 4);
    CHECK(most == 4);
    CHECK(sum_of_balances(q.db) == 24);  // each job's effect once
    // Runs that overlapped in time, from their own start and end: at no start were more
    // than 4 running (the start included).
    CHECK(q.db.scalar<long>("SELECT max((SELECT count(*) FROM " + q.db.table("lease_runs") +
                            " o WHERE o.started_at <= r.started_at AND o.ended_at > r.started_at)) FROM " +
                            q.db.table("lease_runs") + " r") <= 4);
  }

  TEST_CASE("per-key concurrency 1 over 20 keys: no two runs of one key overlap, and the keys run in parallel") {
    ThreeWorkers q(R"({"key": "/account", "per_key_concurrency": 1})");
    q.enqueue(60, 20, 200);
    const auto [most, most_of_a_key] = q.watch_until_done(60s);
    CHECK(most_of_a_key == 1);
    CHECK(most >= 10);  // many keys at once: 20 keys, 30 handler slots
    CHECK(sum_of_balances(q.db) == 60);
    // From the runs' own start and end times: no two runs of one account overlap.
    const std::string runs = q.db.table("lease_runs");
    CHECK(q.db.scalar<long>("SELECT count(*) FROM " + runs + " a JOIN " + runs +
                            " b ON split_part(a.key, '-', 1) = split_part(b.key, '-', 1) AND a.id < b.id"
                            " WHERE a.started_at < b.ended_at AND b.started_at < a.ended_at") == 0);
    CHECK(q.db.scalar<long>("SELECT count(*) FROM " + runs + " WHERE ended_at IS NULL") == 0);
  }
}
