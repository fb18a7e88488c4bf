// The runtime's promises against a real Postgres, in-process (handle_signals off).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/captured_log.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

TEST_SUITE("runtime") {
  TEST_CASE("runtime: 500 keys x 4 copies at concurrency 4 apply every balance exactly once") {
    PgFixture db;
    create_balances(db);
    // 2,000 jobs in random order: each key four times, so copies meet in one batch, in
    // concurrent batches, and after an earlier copy committed.
    std::vector<int> accounts;
    for (int copy = 0; copy < 4; ++copy)
      for (int a = 1; a <= 500; ++a) accounts.push_back(a);
    std::shuffle(accounts.begin(), accounts.end(), std::mt19937(42));
    std::string values;
    for (const int a : accounts) {
      values += (values.empty() ? "" : ",") + std::string("('increment', 'pay-") + std::to_string(a) +
                "', '{\"account\": " + std::to_string(a) + ", \"cents\": 100}')";
    }
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, idempotency_key, payload) VALUES " + values);

    EventRecorder events;
    oncely::Runtime runtime(config_for(db, {.concurrency = 4, .batch_size = 10}), errors_only_options(events));
    runtime.handle("increment", increment_handler(db));
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 60s));
    CHECK(running.stop() == 0);

    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("balances")) == 500);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("balances") + " WHERE cents <> 100") == 0);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("processed_jobs")) == 500);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("dead_letters")) == 0);
    CHECK(events.count(Outcome::completed) == 500);
    CHECK(events.count(Outcome::deduplicated) == 1500);
  }

  TEST_CASE("runtime: without prepared statements (a transaction-mode pooler) jobs apply exactly once too") {
    PgFixture db;
    create_balances(db);
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, idempotency_key, payload) SELECT 'increment', 'k-' || (i % 50), "
            "jsonb_build_object('account', i % 50, 'cents', 1) FROM generate_series(1, 200) AS i");
    EventRecorder events;
    oncely::Config config = config_for(db, {.concurrency = 2, .batch_size = 20});
    config.prepared_statements = false;
    oncely::Runtime runtime(config, errors_only_options(events));
    runtime.handle("increment", increment_handler(db));
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 30s));
    running.stop();
    CHECK(db.scalar<long>("SELECT sum(cents) FROM " + db.table("balances")) == 50);
    CHECK(events.count(Outcome::deduplicated) == 150);
  }

  TEST_CASE("runtime: fails twice, then succeeds: attempts, error history and run_at follow the policy") {
    PgFixture db;
    const auto id = db.scalar<long>("SELECT " + db.table("enqueue") + "('flaky')");
    std::atomic<int> calls{0};
    EventRecorder events;
    oncely::QueueConfig queue{.max_attempts = 5};
    queue.backoff.schedule = {1s, 2s};
    oncely::Runtime runtime(config_for(db, queue), errors_only_options(events));
    runtime.handle("flaky", [&](oncely::JobContext& job) {
      calls.fetch_add(1);
      if (job.attempt() <= 2)
        throw std::runtime_error("upstream said no (attempt " + std::to_string(job.attempt()) + ")");
    });
    RunningRuntime running(runtime);
    const std::string job_row = " FROM " + db.table("jobs") + " WHERE id = " + std::to_string(id);

    REQUIRE(events.wait_for(Outcome::retried, 1, 10s));
    CHECK(db.scalar<int>("SELECT attempts" + job_row) == 1);
    CHECK(db.scalar<std::string>("SELECT last_error" + job_row) == "upstream said no (attempt 1)");
    CHECK(db.scalar<std::string>("SELECT errors->0->>'class' || ' ' || (errors->0->>'attempt')" + job_row) ==
          "retryable 1");
    // The first retry waits schedule[0] = 1 s after the failure (no jitter with a schedule).
    CHECK(
        db.scalar<bool>("SELECT run_at - (errors->0->>'at')::timestamptz BETWEEN interval '0.99 s' AND "
                        "interval '1.01 s'" +
                        job_row));

    REQUIRE(events.wait_for(Outcome::retried, 2, 10s));
    CHECK(db.scalar<int>("SELECT attempts" + job_row) == 2);
    CHECK(db.scalar<int>("SELECT jsonb_array_length(errors)" + job_row) == 2);
    CHECK(
        db.scalar<bool>("SELECT run_at - (errors->1->>'at')::timestamptz BETWEEN interval '1.99 s' AND "
                        "interval '2.01 s'" +
                        job_row));

    REQUIRE(events.wait_for(Outcome::completed, 1, 10s));
    CHECK(calls.load() == 3);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("processed_jobs") +
                         " WHERE job_id = " + std::to_string(id)) == 1);
    const auto e = events.events();
    CHECK(std::count_if(e.begin(), e.end(),
                        [](auto& x) { return x.outcome == Outcome::completed && x.attempt == 3; }) == 1);
  }

  TEST_CASE("runtime: a permanent error dead-letters after exactly one attempt with the full context") {
    PgFixture db;
    create_balances(db);
    const auto id = db.scalar<long>("SELECT " + db.table("enqueue") +
                                    "('charge', '{\"account\": 7}', 'default', 'pay-7', NULL, 3)");
    std::atomic<int> calls{0};
    EventRecorder events;
    oncely::Runtime runtime(config_for(db, {}), errors_only_options(events));
    const auto increment = increment_handler(db);
    runtime.handle("charge", [&](oncely::JobContext& job) {
      calls.fetch_add(1);
      // A write before the failure must not survive it.
      job.tx().exec_params("INSERT INTO " + db.table("balances") + " VALUES (7, 1)");
      throw oncely::PermanentError("amount missing");
    });
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 10s));
    running.stop();
    CHECK(calls.load() == 1);
    const pqxx::row dl = db.exec(
        "SELECT job_id, queue, kind, payload->>'account', idempotency_key, priority, attempts, error_class, "
        "last_error, "
        "jsonb_array_length(errors), errors->0->>'class', error_detail->>'exception', created_at <= failed_at, "
        "replayed_at IS NULL FROM " +
        db.table("dead_letters"))[0];
    CHECK(dl[0].as<long>() == id);
    CHECK(dl[1].as<std::string>() == "default");
    CHECK(dl[2].as<std::string>() == "charge");
    CHECK(dl[3].as<std::string>() == "7");
    CHECK(dl[4].as<std::string>() == "pay-7");
    CHECK(dl[5].as<int>() == 3);
    CHECK(dl[6].as<int>() == 1);
    CHECK(dl[7].as<std::string>() == "permanent");
    CHECK(dl[8].as<std::string>() == "amount missing");
    CHECK(dl[9].as<int>() == 1);
    CHECK(dl[10].as<std::string>() == "permanent");
    CHECK(dl[11].as<std::string>() == "oncely::PermanentError");
    CHECK(dl[12].as<bool>());
    CHECK(dl[13].as<bool>());
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("processed_jobs")) ==
          0);  // a replay must not be a duplicate
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("balances")) == 0);
  }

  TEST_CASE("runtime: always failing with max_attempts 3 is exhausted after exactly 3 attempts") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('doomed', 3)");
    std::atomic<int> calls{0};
    EventRecorder events;
    oncely::QueueConfig queue{.max_attempts = 8};
    queue.backoff.schedule = {10ms};
    oncely::Runtime runtime(config_for(db, queue), errors_only_options(events));
    runtime.handle("doomed", [&](oncely::JobContext&) {
      calls.fetch_add(1);
      throw oncely::RetryAfter(20ms, "still down");
    });
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 20s));
    running.stop();
    CHECK(calls.load() == 3);
    CHECK(events.count(Outcome::retried) == 2);
    CHECK(db.scalar<std::string>(
              "SELECT concat_ws(' ', error_class, attempts, jsonb_array_length(errors), last_error) FROM " +
              db.table("dead_letters")) == "exhausted 3 3 still down");
  }

  TEST_CASE("runtime: a kind without a handler is dead-lettered at once as unknown_kind") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('nobody_handles_this')");
    EventRecorder events;
    oncely::Runtime runtime(config_for(db, {}), errors_only_options(events));
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 10s));
    running.stop();
    CHECK(db.scalar<std::string>("SELECT error_class || ' ' || attempts FROM " + db.table("dead_letters")) ==
          "unknown_kind 1");
    CHECK(events.count(Outcome::retried) == 0);
  }

  TEST_CASE("runtime: an SQL error through plain exec loses the batch, but the job's failure is still recorded") {
    PgFixture db;
    create_balances(db);
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, payload) VALUES ('increment', '{\"account\": 1, \"cents\": 5}'), "
            "('bad_sql', '{}'), ('increment', '{\"account\": 2, \"cents\": 5}')");
    EventRecorder events;
    oncely::QueueConfig queue{.max_attempts = 2};
    queue.backoff.schedule = {10ms};
    oncely::Runtime runtime(config_for(db, queue), errors_only_options(events));
    runtime.handle("increment", increment_handler(db));
    runtime.handle("bad_sql", [](oncely::JobContext& job) { job.tx().exec("SELECT * FROM no_such_table"); });
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 20s));
    REQUIRE(wait_until([&] { return db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 20s));
    running.stop();
    CHECK(db.scalar<long>("SELECT sum(cents) FROM " + db.table("balances")) == 10);
    CHECK(db.scalar<std::string>("SELECT error_class || ' ' || attempts FROM " + db.table("dead_letters")) ==
          "exhausted 2");
  }

  TEST_CASE("runtime: a handler that swallows a plain-exec SQL error loses nothing of its batch") {
    // libpqxx rolls the whole transaction back on an error through plain exec(); a handler
    // that catches it and returns must not make the batch's earlier work vanish.
    PgFixture db;
    create_balances(db);
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, idempotency_key, payload) VALUES "
            "('increment', 'pay-1', '{\"account\": 1, \"cents\": 5}'), ('swallow', NULL, '{}'), "
            "('increment', 'pay-2', '{\"account\": 2, \"cents\": 5}')");
    EventRecorder events;
    oncely::QueueConfig queue{.max_attempts = 2};
    queue.backoff.schedule = {10ms};
    oncely::Runtime runtime(config_for(db, queue), errors_only_options(events));
    runtime.handle("increment", increment_handler(db));
    runtime.handle("swallow", [](oncely::JobContext& job) {
      try {
        job.tx().exec("INSERT INTO nowhere VALUES (1)");
      } catch (const std::exception&) {  // "ignore the error": the transaction is gone anyway
      }
    });
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 20s));
    running.stop();
    CHECK(db.scalar<long>("SELECT sum(cents) FROM " + db.table("balances")) == 10);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs") +
                          " WHERE idempotency_key LIKE 'pay-%'") == 2);
    CHECK(db.scalar<std::string>("SELECT kind || ' ' || error_class || ' ' || attempts FROM " +
                                 db.table("dead_letters")) == "swallow exhausted 2");
  }

  // Counts how often each job's handler was called (re-runs of a rolled-back batch included).
  struct Invocations {
    std::mutex mutex;
    std::map<std::int64_t, int> by_job;
    void add(std::int64_t id) {
      std::lock_guard lock(mutex);
      ++by_job[id];
    }
    int of(std::int64_t id) {
      std::lock_guard lock(mutex);
      return by_job[id];
    }
  };

  // The increment handler, counting its calls and failing after its write when the payload says "fail".
  oncely::Handler counted_increment(const PgFixture& db, Invocations& calls) {
    return [&calls, increment = increment_handler(db)](oncely::JobContext& job) {
      calls.add(job.id());
      increment(job);
      if (job.payload().at("fail").get<bool>()) throw std::runtime_error("failed after writing");
    };
  }

  TEST_CASE(
      "runtime: a transaction-only handler failing after its write re-runs its batch, and applies nothing twice") {
    // 41 increments in one batch, the 21st writes and then fails. Without savepoints its
    // write cannot be undone alone: the batch rolls back, its failure is recorded afresh,
    // and the other 40 run again (once more for the first 20) and apply exactly once.
    PgFixture db;
    create_balances(db);
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, idempotency_key, payload) SELECT 'increment', 'pay-' || i, "
            "jsonb_build_object('account', i, 'cents', 10, 'fail', i = 21) FROM generate_series(1, 41) AS i");
    const auto first = db.scalar<std::int64_t>("SELECT min(id) FROM " + db.table("jobs"));
    EventRecorder events;
    oncely::QueueConfig queue{.concurrency = 1, .batch_size = 100, .max_attempts = 2};
    queue.backoff.schedule = {10ms};
    oncely::Runtime runtime(config_for(db, queue), errors_only_options(events));
    Invocations calls;
    runtime.handle("increment", counted_increment(db, calls), {.transaction_only = true});
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 20s));
    REQUIRE(wait_until([&] { return db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 20s));
    running.stop();

    CHECK(db.scalar<long>("SELECT sum(cents) FROM " + db.table("balances")) == 400);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("balances") + " WHERE account = 21") == 0);
    CHECK(db.scalar<std::string>("SELECT error_class || ' ' || attempts FROM " + db.table("dead_letters")) ==
          "exhausted 2");
    CHECK(events.count(Outcome::completed) == 40);
    CHECK(events.count(Outcome::retried) == 1);
    CHECK(calls.of(first) == 2);       // ran in the rolled-back batch, and again
    CHECK(calls.of(first + 40) == 1);  // after the failure: not started in the lost batch
    CHECK(calls.of(first + 20) == 2);  // two attempts, the second isolated by a savepoint
  }

  TEST_CASE(
      "runtime: a batch that ran a handler with outside effects never re-runs it for a transaction-only failure") {
    PgFixture db;
    create_balances(db);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, payload) VALUES ('notify', '{}')");
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, idempotency_key, payload) SELECT 'increment', 'pay-' || i, "
            "jsonb_build_object('account', i, 'cents', 10, 'fail', i = 10) FROM generate_series(1, 20) AS i");
    const auto notify = db.scalar<std::int64_t>("SELECT min(id) FROM " + db.table("jobs"));
    EventRecorder events;
    oncely::QueueConfig queue{.concurrency = 1, .batch_size = 100, .max_attempts = 1};
    oncely::Runtime runtime(config_for(db, queue), errors_only_options(events));
    Invocations calls;
    runtime.handle("notify", [&calls](oncely::JobContext& job) { calls.add(job.id()); });  // e.g. an HTTP call
    runtime.handle("increment", counted_increment(db, calls), {.transaction_only = true});
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 20s));
    running.stop();

    CHECK(calls.of(notify) == 1);
    for (std::int64_t id = notify + 1; id <= notify + 20; ++id) CHECK_MESSAGE(calls.of(id) == 1, id);
    CHECK(db.scalar<long>("SELECT sum(cents) FROM " + db.table("balances")) == 190);
    CHECK(events.count(Outcome::completed) == 20);
    CHECK(events.count(Outcome::dead_lettered) == 1);
  }

  TEST_CASE("runtime: a batch whose COMMIT fails does not loop: its jobs run alone and the culprit gives up") {
    // A deferred foreign key fails at COMMIT, after every handler returned: the whole batch
    // is lost, on a connection that stays open. The culprit's attempts are the server's
    // error, not a crash (tests/pg/claim_robustness_pgtest.cpp has the details).
    PgFixture db;
    db.exec("CREATE TABLE " + db.table("parents") + " (id int PRIMARY KEY)");
    db.exec("INSERT INTO " + db.table("parents") + " VALUES (1), (2)");
    db.exec("CREATE TABLE " + db.table("children") + " (parent int REFERENCES " + db.table("parents") +
            " DEFERRABLE INITIALLY DEFERRED)");
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, payload) VALUES ('child', '{\"parent\": 1}'), "
            "('child', '{\"parent\": 99}'), ('child', '{\"parent\": 2}')");
    EventRecorder events;
    CapturedLog log(spdlog::level::warn);
    oncely::Runtime runtime(
        config_for(db, {.concurrency = 2, .max_attempts = 3, .backoff = {.schedule = {1ms}}}),
        oncely::RuntimeOptions{.logger = log.logger, .on_event = events.callback(), .handle_signals = false});
    const std::string insert = "INSERT INTO " + db.table("children") + " VALUES ($1)";
    runtime.handle("child", [insert](oncely::JobContext& job) {
      job.tx().exec_params(insert, job.payload().at("parent").get<int>());
    });
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 60s));
    running.stop();
    CHECK(db.scalar<std::string>("SELECT string_agg(parent::text, ',' ORDER BY parent) FROM " + db.table("children")) ==
          "1,2");
    CHECK(db.scalar<std::string>("SELECT payload->>'parent' || ' ' || error_class || ' ' || attempts FROM " +
                                 db.table("dead_letters")) == "99 exhausted 3");
    CHECK(db.scalar<std::string>("SELECT last_error FROM " + db.table("dead_letters")).find("COMMIT failed") !=
          std::string::npos);
    // Each failed COMMIT is the job's attempt, recorded at once: no worker error (once, a new
    // transaction was started while the failed one lived, and the worker backed off).
    CAPTURE(log.text());
    CHECK(log.count("worker error") == 0);
  }

  TEST_CASE("runtime: slow jobs arriving at an idle queue are spread over its threads, not hoarded by one claim") {
    // 12 jobs arrive in one INSERT at an idle queue of 4 threads; each waits until four of
    // them run at once (3 s at most: a loaded machine may take over a second to wake a thread;
    // a claim that hoards never gets there, however long it waits). Before a thread's first claim took one job, the
    // thread woken first locked all 12 in one batch and ran them one after another while the other three slept: never
    // four at once. Through tests/pgbouncer.sh's pool (ONCELY_TEST_POOL_SIZE server connections) no more batches than
    // that can be open at once.
    const char* pool = std::getenv("ONCELY_TEST_POOL_SIZE");
    const int at_once = pool != nullptr && *pool != '\0' ? std::min(4, std::atoi(pool)) : 4;
    PgFixture db;
    EventRecorder events;
    const oncely::QueueConfig queue{.concurrency = 4, .batch_size = 500};
    oncely::Runtime runtime(config_for(db, queue), errors_only_options(events));
    std::mutex mutex;
    std::condition_variable changed;
    int running = 0;
    int peak = 0;
    runtime.handle("slow", [&](oncely::JobContext&) {
      std::unique_lock lock(mutex);
      peak = std::max(peak, ++running);
      changed.notify_all();
      changed.wait_for(lock, 3s, [&] { return peak >= at_once; });
      --running;
    });
    runtime.handle("ping", [](oncely::JobContext&) {});
    RunningRuntime run(runtime);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('ping')");
    REQUIRE(events.wait_for(Outcome::completed, 1, 20s));  // the threads are up, and idle again
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) SELECT 'slow' FROM generate_series(1, 12)");
    REQUIRE(events.wait_for(Outcome::completed, 13, 60s));
    run.stop();
    CHECK(peak == at_once);
  }

  TEST_CASE("runtime: a handler over job_timeout is a retryable timeout, enforced by the server too") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('slow_sql', 1)");
    EventRecorder events;
    oncely::Runtime runtime(config_for(db, {.job_timeout = 1s}), errors_only_options(events));
    runtime.handle("slow_sql", [](oncely::JobContext& job) { job.tx().exec_params("SELECT pg_sleep(30)"); });
    RunningRuntime running(runtime);
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
    CHECK(std::chrono::steady_clock::now() - start < 10s);
    running.stop();
    CHECK(db.scalar<std::string>("SELECT error_class || ' ' || (errors->0->>'class') FROM " +
                                 db.table("dead_letters")) == "timeout timeout");
  }

  TEST_CASE("runtime: an idle worker starts a freshly inserted job within 50 ms at the median") {
    PgFixture db;
    std::mutex mutex;
    std::condition_variable started_cv;
    std::optional<std::chrono::steady_clock::time_point> started;
    EventRecorder events;
    // A long poll interval: only NOTIFY can explain a fast start.
    oncely::Runtime runtime(config_for(db, {.poll_interval = 30s}), errors_only_options(events));
    runtime.handle("ping", [&](oncely::JobContext&) {
      std::lock_guard lock(mutex);
      started = std::chrono::steady_clock::now();
      started_cv.notify_all();
    });
    RunningRuntime running(runtime);
    // Wait until the worker is up and idle: a first job goes through.
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('ping')");
    REQUIRE(events.wait_for(Outcome::completed, 1, 10s));
    std::vector<double> latencies_ms;
    for (int i = 0; i < 25; ++i) {
      {
        std::lock_guard lock(mutex);
        started.reset();
      }
      const auto before = std::chrono::steady_clock::now();
      db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('ping')");
      std::unique_lock lock(mutex);
      REQUIRE(started_cv.wait_for(lock, 5s, [&] { return started.has_value(); }));
      latencies_ms.push_back(std::chrono::duration<double, std::milli>(*started - before).count());
      lock.unlock();
      REQUIRE(events.wait_for(Outcome::completed, static_cast<std::size_t>(i) + 2, 5s));
    }
    std::sort(latencies_ms.begin(), latencies_ms.end());
    MESSAGE("enqueue -> handler start: p50 " << latencies_ms[12] << " ms, max " << latencies_ms.back() << " ms");
    CHECK(latencies_ms[12] < 50.0);
  }

}  // TEST_SUITE
