// Rows and handlers that used to break a batch: poison rows a claim cannot handle, a handler
// that commits its job's transaction, a COMMIT refused by a deferred constraint, and the key
// of a replayed job that had none. In-process runtime (handle_signals off), real Postgres.
#include <doctest/doctest.h>

#include <mutex>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "oncely/client.hpp"
#include "oncely/dead_letters.hpp"
#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/captured_log.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

// Random printable text of `bytes` bytes, made by the server: incompressible, so an index
// entry of it is as large as the text.
std::string random_text_sql(int bytes) {
  return "(SELECT string_agg(chr(33 + (random() * 93)::int), '') FROM generate_series(1, " + std::to_string(bytes) +
         "))";
}

}  // namespace

TEST_SUITE("claim_robustness") {
  TEST_CASE("claim_robustness: names and keys longer than a btree entry are refused at INSERT, naming the bound") {
    PgFixture db;
    const std::string jobs = db.table("jobs");
    const auto refused = [&](const std::string& sql) -> std::string {
      try {
        db.exec(sql);
      } catch (const pqxx::sql_error& e) {
        return e.what();
      }
      return "accepted";
    };
    CHECK(refused("INSERT INTO " + jobs + " (kind, idempotency_key) VALUES ('k', " + random_text_sql(3000) + ")")
              .find("jobs_idempotency_key_at_most_1024_bytes") != std::string::npos);
    CHECK(refused("INSERT INTO " + jobs + " (kind) VALUES (" + random_text_sql(10000) + ")")
              .find("jobs_kind_at_most_255_bytes") != std::string::npos);
    CHECK(refused("INSERT INTO " + jobs + " (kind, queue) VALUES ('k', repeat('q', 129))")
              .find("jobs_queue_at_most_128_bytes") != std::string::npos);
    // The bounds themselves are allowed.
    CHECK(refused("INSERT INTO " + jobs + " (kind, queue, idempotency_key) VALUES (" + random_text_sql(255) + ", " +
                  "repeat('q', 128), " + random_text_sql(1024) + ")") == "accepted");
    CHECK_THROWS_AS(oncely::Client(oncely::DatabaseUrl(db.url), db.schema)
                        .enqueue({.kind = "k", .idempotency_key = std::string(1025, 'x')}),
                    oncely::ConfigError);
  }

  TEST_CASE("claim_robustness: poison rows among 2,000 good jobs are dead-lettered, every good job runs") {
    PgFixture db;
    create_balances(db);
    const std::string jobs = db.table("jobs");
    // Rows from before the bounds existed (or from anything else the claim cannot handle):
    // the constraints are lifted while they go in and come back as migration 0005 adds them.
    db.exec("ALTER TABLE " + jobs +
            " DROP CONSTRAINT IF EXISTS jobs_kind_at_most_255_bytes, DROP CONSTRAINT IF EXISTS " +
            "jobs_idempotency_key_at_most_1024_bytes");
    db.exec("INSERT INTO " + jobs +
            " (kind, idempotency_key, payload) SELECT 'increment', 'good-' || i,"
            " jsonb_build_object('account', i % 100, 'cents', 1) FROM generate_series(1, 1000) AS i");
    db.exec("INSERT INTO " + jobs + " (kind, idempotency_key, payload) VALUES ('increment', " + random_text_sql(3000) +
            ", '{\"account\": 1, \"cents\": 1000000}')");
    db.exec("INSERT INTO " + jobs + " (kind, idempotency_key, payload) VALUES ('increment', " +
            random_text_sql(100000) + ", '{\"account\": 1, \"cents\": 1000000}')");
    db.exec("INSERT INTO " + jobs + " (kind, idempotency_key, payload) VALUES (" + random_text_sql(10000) +
            ", 'poison-kind', '{\"account\": 1, \"cents\": 1000000}')");
    db.exec("INSERT INTO " + jobs +
            " (kind, idempotency_key, payload) VALUES ('increment', 'poison-number', '{\"account\": 1, \"cents\": "
            "1e400}')");
    db.exec("INSERT INTO " + jobs +
            " (kind, idempotency_key, payload) SELECT 'increment', 'good-' || i,"
            " jsonb_build_object('account', i % 100, 'cents', 1) FROM generate_series(1001, 2000) AS i");

    for (const int concurrency : {1, 2}) {
      CAPTURE(concurrency);
      if (concurrency == 2) {
        // The same rows again, for a pool of two (the first run dead-lettered them).
        db.exec("TRUNCATE " + db.table("balances") + ", " + db.table("dead_letters") + ", " +
                db.table("processed_jobs"));
        db.exec("ALTER TABLE " + jobs +
                " DROP CONSTRAINT IF EXISTS jobs_kind_at_most_255_bytes, DROP CONSTRAINT IF EXISTS " +
                "jobs_idempotency_key_at_most_1024_bytes");
        db.exec("INSERT INTO " + jobs +
                " (kind, idempotency_key, payload) SELECT 'increment', 'again-' || i,"
                " jsonb_build_object('account', i % 100, 'cents', 1) FROM generate_series(1, 2000) AS i");
        db.exec("INSERT INTO " + jobs + " (kind, idempotency_key, payload) VALUES ('increment', " +
                random_text_sql(3000) + ", '{}'), (" + random_text_sql(10000) + ", 'poison-kind', '{}')");
        db.exec("INSERT INTO " + jobs +
                " (kind, idempotency_key, payload) VALUES ('increment', 'poison-number', '{\"cents\": 1e400}')");
      }
      CapturedLog log(spdlog::level::warn);
      EventRecorder events;
      oncely::Runtime runtime(
          config_for(db, {.concurrency = concurrency, .batch_size = 500}),
          oncely::RuntimeOptions{.logger = log.logger, .on_event = events.callback(), .handle_signals = false});
      runtime.handle("increment", increment_handler(db));
      RunningRuntime running(runtime);
      REQUIRE(wait_until([&] { return db.scalar<long>("SELECT count(*) FROM " + jobs) == 0; }, 30s));
      CHECK(running.stop() == 0);

      CHECK(db.scalar<long>("SELECT sum(cents) FROM " + db.table("balances")) == 2000);
      const long poison = concurrency == 1 ? 4 : 3;
      CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") + " WHERE error_class = 'unreadable'") ==
            poison);
      CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters")) == poison);
      // The unreadable number is its own job's failure, the rows the claim could not take
      // are named by the server's message; nothing loops.
      CHECK(db.scalar<std::string>("SELECT last_error FROM " + db.table("dead_letters") +
                                   " WHERE idempotency_key = 'poison-number'")
                .find("is out of range for a double") != std::string::npos);
      CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") +
                            " WHERE last_error LIKE '%index row%'") == poison - 1);
      // Each thread meets each unclaimable row about once before one of them dead-letters it
      // (two threads may both fail on the same row, and, rarely, one again in the moment
      // between the other's rollback and its re-claim); a loop would fail thousands of times.
      CHECK(log.count("claim failed") <= 2 * concurrency * (poison - 1));
      CHECK(log.count("worker error") == 0);
    }
  }

  TEST_CASE("claim_robustness: the dead-letter line of a row the claim cannot handle carries its job's trace id") {
    PgFixture db;
    const std::string jobs = db.table("jobs");
    db.exec("ALTER TABLE " + jobs + " DROP CONSTRAINT IF EXISTS jobs_idempotency_key_at_most_1024_bytes");
    const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    db.exec("INSERT INTO " + jobs + " (kind, idempotency_key, trace_context) VALUES ('noop', " + random_text_sql(3000) +
            ", '00-" + trace + "-00f067aa0ba902b7-01')");
    CapturedLog log(spdlog::level::warn);
    EventRecorder events;
    oncely::Runtime runtime(
        config_for(db, {}),
        oncely::RuntimeOptions{.logger = log.logger, .on_event = events.callback(), .handle_signals = false});
    runtime.handle("noop", [](oncely::JobContext&) {});
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 20s));
    CHECK(running.stop() == 0);
    CHECK(db.scalar<std::string>("SELECT error_class FROM " + db.table("dead_letters")) == "unreadable");
    const std::string text = log.text();
    INFO(text);
    CHECK(log.count("job dead-lettered") == 1);
    CHECK(log.count("job dead-lettered queue=default kind=(unreadable) id=" +
                    std::to_string(db.scalar<long>("SELECT job_id FROM " + db.table("dead_letters"))) +
                    " attempt=0 trace_id=" + trace + " class=unreadable") == 1);
  }

  TEST_CASE("claim_robustness: a C++ handler that commits its job's transaction cannot make later jobs duplicates") {
    PgFixture db;
    create_balances(db);
    const std::string jobs = db.table("jobs");
    db.exec("INSERT INTO " + jobs +
            " (kind, idempotency_key, payload) SELECT CASE WHEN i = 50 THEN 'commits' ELSE 'increment' END, 'k-' || i,"
            " jsonb_build_object('account', i, 'cents', 1) FROM generate_series(1, 100) AS i");

    EventRecorder events;
    auto log = std::make_shared<spdlog::logger>("test");
    oncely::Runtime runtime(
        config_for(db, {.concurrency = 1, .batch_size = 100}),
        oncely::RuntimeOptions{.logger = log, .on_event = events.callback(), .handle_signals = false});
    runtime.handle("increment", increment_handler(db));
    const std::string balances = db.table("balances");
    runtime.handle("commits", [balances](oncely::JobContext& job) {
      job.tx().exec_params("INSERT INTO " + balances + " (account, cents) VALUES ($1, 1000)",
                           job.payload().at("account").get<long>());
      job.tx().exec("COMMIT");
    });
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<long>("SELECT count(*) FROM " + jobs) == 0; }, 30s));
    CHECK(running.stop() == 0);

    // Every other job ran and applied once; the committing one applied nothing and is a
    // permanent dead letter saying why; nothing was skipped as a duplicate.
    CHECK(db.scalar<long>("SELECT count(*) FROM " + balances) == 99);
    CHECK(db.scalar<long>("SELECT sum(cents) FROM " + balances) == 99);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + balances + " WHERE account = 50") == 0);
    CHECK(events.count(Outcome::deduplicated) == 0);
    CHECK(events.count(Outcome::completed) == 99);
    CHECK(db.scalar<std::string>("SELECT error_class FROM " + db.table("dead_letters") +
                                 " WHERE idempotency_key = 'k-50'") == "permanent");
    CHECK(
        db.scalar<std::string>("SELECT last_error FROM " + db.table("dead_letters") + " WHERE idempotency_key = 'k-50'")
            .find("committed by its handler") != std::string::npos);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs")) == 99);
  }

  TEST_CASE("claim_robustness: a COMMIT refused by a deferred constraint is the attempt of the job that caused it") {
    PgFixture db;
    const std::string receipts = db.table("receipts");
    db.exec("CREATE TABLE " + receipts +
            " (number int, CONSTRAINT receipts_number_unique UNIQUE (number) DEFERRABLE "
            "INITIALLY DEFERRED)");
    db.exec("INSERT INTO " + receipts + " VALUES (5)");  // job 5's receipt number is taken
    db.exec(
        "INSERT INTO " + db.table("jobs") +
        " (kind, idempotency_key, payload, max_attempts) SELECT 'receipt', 'r-' || i, jsonb_build_object('number', i),"
        " 2 FROM generate_series(1, 10) AS i");

    EventRecorder events;
    auto log = std::make_shared<spdlog::logger>("test");
    oncely::QueueConfig queue{.concurrency = 1, .batch_size = 10};
    queue.backoff.schedule = {1ms};
    oncely::Runtime runtime(
        config_for(db, queue),
        oncely::RuntimeOptions{.logger = log, .on_event = events.callback(), .handle_signals = false});
    runtime.handle("receipt", [receipts](oncely::JobContext& job) {
      job.tx().exec_params("INSERT INTO " + receipts + " VALUES ($1)", job.payload().at("number").get<int>());
    });
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 30s));
    CHECK(running.stop() == 0);

    CHECK(db.scalar<long>("SELECT count(*) FROM " + receipts) == 10);  // 9 jobs + the one taken before
    CHECK(events.count(Outcome::completed) == 9);
    CHECK(events.count(Outcome::crashed) == 0);
    // Its two attempts failed with the server's error, as any failed attempt does.
    const auto row = db.exec("SELECT error_class, last_error, jsonb_array_length(errors), errors->0->>'class' FROM " +
                             db.table("dead_letters") + " WHERE idempotency_key = 'r-5'");
    REQUIRE(row.size() == 1);
    CHECK(row[0][0].as<std::string>() == "exhausted");
    CHECK(row[0][1].as<std::string>().find("COMMIT failed") != std::string::npos);
    CHECK(row[0][1].as<std::string>().find("receipts_number_unique") != std::string::npos);
    CHECK(row[0][2].as<int>() == 2);
    CHECK(row[0][3].as<std::string>() == "retryable");
  }

  TEST_CASE("claim_robustness: a replayed job without a key keeps the key it had, through every replay") {
    PgFixture db;
    const std::int64_t first_id = oncely::Client(oncely::DatabaseUrl(db.url), db.schema).enqueue({.kind = "webhook"});
    std::mutex mutex;
    std::vector<std::string> keys_seen;
    std::atomic<int> runs{0};
    EventRecorder events;
    auto log = std::make_shared<spdlog::logger>("test");
    oncely::Runtime runtime(
        config_for(db, {.concurrency = 1}),
        oncely::RuntimeOptions{.logger = log, .on_event = events.callback(), .handle_signals = false});
    runtime.handle("webhook", [&](oncely::JobContext& job) {
      {
        std::lock_guard lock(mutex);
        keys_seen.push_back(job.idempotency_key());
      }
      // The first two runs fail for good; the third (the second replay) succeeds.
      if (runs.fetch_add(1) < 2) throw oncely::PermanentError("downstream said 400");
    });
    RunningRuntime running(runtime);
    oncely::DeadLetterFilter all;
    all.all = true;
    for (std::size_t replay = 1; replay <= 2; ++replay) {
      REQUIRE(events.wait_for(Outcome::dead_lettered, replay, 10s));
      REQUIRE(oncely::replay_dead_letters(oncely::DatabaseUrl(db.url), db.schema, all).replayed.size() == 1);
    }
    REQUIRE(events.wait_for(Outcome::completed, 1, 10s));
    CHECK(running.stop() == 0);
    REQUIRE(keys_seen.size() == 3);
    for (const std::string& key : keys_seen) CHECK(key == std::to_string(first_id));
    // The replays were new jobs, with new ids.
    CHECK(db.scalar<long>("SELECT count(DISTINCT replayed_job_id) FROM " + db.table("dead_letters")) == 2);
  }

}  // TEST_SUITE
