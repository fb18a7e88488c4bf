// Worker processes that are killed, crash, get SIGTERM, or lose their server.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <random>

#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

TEST_SUITE("crash") {
  TEST_CASE("crash: a handler that aborts the process every time ends as 'crashed' after max_attempts") {
    PgFixture db;
    const auto id = db.scalar<long>("SELECT " + db.table("enqueue") + "('abort', '{}', 'default', NULL, NULL, 0, 3)");
    int crashes = 0;
    bool dead_lettered = false;
    for (int run = 0; run < 7 && !dead_lettered; ++run) {
      WorkerProcess worker(db, R"({"queues": {"default": {"poll_interval": "100ms"}}})");
      REQUIRE(wait_until([&] { return worker.process->exited() || count_of(db, "dead_letters") > 0; }, 20s));
      if (count_of(db, "dead_letters") > 0) {
        dead_lettered = true;
        worker.process->signal(SIGTERM);
      }
      const ProcessResult r = worker.process->wait();
      if (r.exit_code == 128 + SIGABRT)
        ++crashes;
      else
        CHECK_MESSAGE(r.exit_code == 0, r.err);
    }
    REQUIRE(dead_lettered);
    // Its first two crashes are not charged: it ran beside the process's other threads, so
    // the deaths were not attributable to it (suspects.hpp: a first crash runs again beside
    // the others, as after an outside kill). Seen in two, it runs isolated, alone here (the
    // only suspect), and each of its next three crashes counts.
    CHECK(crashes == 5);
    CHECK(db.scalar<std::string>(
              "SELECT concat_ws(' ', job_id, error_class, attempts, jsonb_array_length(errors)) FROM " +
              db.table("dead_letters")) == std::to_string(id) + " crashed 3 3");
    CHECK(db.scalar<std::string>("SELECT string_agg(DISTINCT e->>'class', ',') FROM " + db.table("dead_letters") +
                                 ", jsonb_array_elements(errors) AS e") == "crashed");
    CHECK(count_of(db, "jobs") == 0);
  }

  TEST_CASE("crash: a job that kills its worker does not take the rest of its batch with it") {
    PgFixture db;
    create_balances(db);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('abort', 3)");  // first in line
    enqueue_increments(db, 20);
    int runs = 0;
    for (; runs < 12 && count_of(db, "jobs") > 0; ++runs) {
      WorkerProcess worker(
          db, R"({"queues": {"default": {"batch_size": 50, "max_attempts": 3, "poll_interval": "100ms"}}})");
      REQUIRE(wait_until([&] { return worker.process->exited() || count_of(db, "jobs") == 0; }, 20s));
      worker.process->signal(SIGTERM);
      worker.process->wait();
    }
    CHECK(count_of(db, "jobs") == 0);
    CHECK(sum_of_balances(db) == 20);  // every innocent job applied, once
    CHECK(db.scalar<std::string>("SELECT string_agg(kind || ' ' || error_class || ' ' || attempts, ',') FROM " +
                                 db.table("dead_letters")) == "abort crashed 3");
    MESSAGE("worker runs: " << runs);
  }

  TEST_CASE("crash: after a crash, a failure that ends the transaction is still recorded (no loop)") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('crash_then_bad_sql', 3)");
    // Three crashes (two as a suspect beside others, the third alone: charged), then a run
    // that records the two failures.
    for (int run = 0; run < 6 && count_of(db, "jobs") > 0; ++run) {
      WorkerProcess worker(db,
                           R"({"queues": {"default": {"poll_interval": "100ms", "backoff": {"schedule": ["10ms"]}}}})");
      REQUIRE(wait_until([&] { return worker.process->exited() || count_of(db, "jobs") == 0; }, 20s));
      worker.process->signal(SIGTERM);
      worker.process->wait();
    }
    CHECK(count_of(db, "jobs") == 0);
    CHECK(db.scalar<std::string>("SELECT concat_ws(' ', error_class, attempts, "
                                 "(SELECT string_agg(e->>'class', ',') FROM jsonb_array_elements(errors) AS e)) FROM " +
                                 db.table("dead_letters")) == "exhausted 3 crashed,retryable,retryable");
  }

  TEST_CASE("crash: SIGTERM with jobs in flight exits 0, loses nothing and applies nothing by halves") {
    PgFixture db;
    create_balances(db);
    enqueue_increments(db, 60, "slow_increment", 50);
    WorkerProcess worker(db,
                         R"({"shutdown_grace": "10s", "queues": {"default": {"concurrency": 2, "batch_size": 10}}})");
    REQUIRE(wait_until([&] { return sum_of_balances(db) >= 6; }, 20s));
    worker.process->signal(SIGTERM);
    const auto signalled = std::chrono::steady_clock::now();
    const ProcessResult r = worker.process->wait();
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    CHECK(std::chrono::steady_clock::now() - signalled < 5s);
    const long applied = sum_of_balances(db);
    CHECK(applied < 60);                               // it stopped early...
    CHECK(applied == count_of(db, "processed_jobs"));  // ...every applied job has its marker and vice versa
    CHECK(applied + count_of(db, "jobs") == 60);       // ...and every other job is still there
    CHECK(count_of(db, "dead_letters") == 0);
    CHECK(count_of(db, "workers") == 0);  // it deregistered
    CHECK(count_of(db, "attempts_in_flight") == 0);
    CHECK(db.scalar<long>("SELECT coalesce(max(attempts), 0) FROM " + db.table("jobs")) ==
          0);  // nothing was counted as a failure

    // A fresh worker finishes the rest exactly once.
    WorkerProcess again(db, R"({"queues": {"default": {"concurrency": 2}}})");
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 30s));
    again.process->signal(SIGTERM);
    CHECK(again.process->wait().exit_code == 0);
    CHECK(sum_of_balances(db) == 60);
  }

  TEST_CASE("crash: kill -9 at random moments, five times, with restarts: every sum exact") {
    PgFixture db;
    create_balances(db);
    constexpr int kJobs = 20000;
    enqueue_increments(db, kJobs);
    const std::string config =
        R"({"queues": {"default": {"concurrency": 2, "batch_size": 50, "poll_interval": "100ms"}}})";
    std::mt19937 rng(std::random_device{}());
    for (int kill = 1; kill <= 5; ++kill) {
      WorkerProcess worker(db, config);
      // Kill at a random point of this run's share of the work.
      const long target = sum_of_balances(db) + std::uniform_int_distribution<long>(200, kJobs / 8)(rng);
      REQUIRE(wait_until([&] { return sum_of_balances(db) >= target || count_of(db, "jobs") == 0; }, 60s));
      worker.process->signal(SIGKILL);
      CHECK(worker.process->wait().exit_code == 128 + SIGKILL);
      MESSAGE("kill " << kill << " after " << sum_of_balances(db) << " jobs applied");
    }
    WorkerProcess last(db, config);
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 120s));
    last.process->signal(SIGTERM);
    CHECK(last.process->wait().exit_code == 0);
    CHECK(sum_of_balances(db) == kJobs);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("balances") + " WHERE cents <> " +
                          std::to_string(kJobs / 100)) == 0);
    CHECK(count_of(db, "processed_jobs") == kJobs);
    CHECK(count_of(db, "dead_letters") == 0);
  }

}  // TEST_SUITE
