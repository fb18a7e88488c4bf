#include <doctest/doctest.h>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "oncely/stats.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

TEST_SUITE("stats") {
  TEST_CASE("stats: depth, ready, scheduled, retrying and the oldest ready job's age") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") +
            " (queue, kind, run_at) VALUES "
            "('q', 'k', now() - interval '10 minutes'), ('q', 'k', now() - interval '1 minute'), ('q', 'k', now()), "
            "('q', 'k', now() + interval '1 hour'), ('q', 'k', now() + interval '2 hours'), "
            "('q', 'k', now() + interval '30 seconds'), ('other', 'k', now())");
    // The sixth failed twice: attempts are a retry's to set (schema version 6 refuses them in an INSERT).
    db.exec("UPDATE " + db.table("jobs") + " SET attempts = 2 WHERE id = (SELECT max(id) FROM " + db.table("jobs") +
            " WHERE queue = 'q')");
    const auto stats = oncely::collect_stats(oncely::DatabaseUrl(db.url), db.schema, std::string("q"));
    REQUIRE(stats.queues.size() == 1);
    const auto& q = stats.queues[0];
    CHECK(q.queue == "q");
    CHECK(q.depth == 6);
    CHECK(q.ready == 3);
    CHECK(q.scheduled == 2);
    CHECK(q.retrying == 1);
    CHECK(q.in_flight == 0);
    REQUIRE(q.oldest_ready_age_s);
    CHECK(*q.oldest_ready_age_s >= 600);
    CHECK(*q.oldest_ready_age_s < 700);
    CHECK_FALSE(q.failure_rate_5m);
  }

  TEST_CASE("stats: the rates and counts match a known workload, through the CLI's JSON too") {
    PgFixture db;
    // 30 jobs that complete, 10 duplicate copies of them, one that fails once and then
    // completes, two that fail permanently.
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, idempotency_key) SELECT 'ok', 'k-' || (i % 30) FROM generate_series(0, 39) AS i");
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('flaky'), ('bad'), ('bad')");
    EventRecorder events;
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    config.queues = {{"default", oncely::QueueConfig{.concurrency = 2, .batch_size = 7}}};
    config.queues["default"].backoff.schedule = {10ms};
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    oncely::Runtime runtime(
        config, oncely::RuntimeOptions{.logger = log, .on_event = events.callback(), .handle_signals = false});
    runtime.handle("ok", [](oncely::JobContext&) {});
    runtime.handle("flaky", [](oncely::JobContext& job) {
      if (job.attempt() == 1) throw std::runtime_error("first time fails");
    });
    runtime.handle("bad", [](oncely::JobContext&) { throw oncely::PermanentError("never"); });
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 20s));
    running.stop();

    const auto stats = oncely::collect_stats(oncely::DatabaseUrl(db.url), db.schema);
    REQUIRE(stats.queues.size() == 1);
    const auto& q = stats.queues[0];
    // Everything happened within the last 15 clock minutes: each count over 15.
    CHECK(q.per_minute_15m.completed * 15 == doctest::Approx(31));
    CHECK(q.per_minute_15m.deduplicated * 15 == doctest::Approx(10));
    CHECK(q.per_minute_15m.retried * 15 == doctest::Approx(1));
    CHECK(q.per_minute_15m.dead_lettered * 15 == doctest::Approx(2));
    CHECK(q.per_minute_5m.completed * 5 == doctest::Approx(31));
    CHECK(q.attempts_5m == 34);
    REQUIRE(q.failure_rate_5m);
    CHECK(*q.failure_rate_5m == doctest::Approx(3.0 / 34));
    CHECK(q.dead_letters == 2);
    CHECK(q.dead_letters_per_minute_15m * 15 == doctest::Approx(2));
    CHECK(q.depth == 0);
    CHECK(stats.workers.empty());  // it deregistered on the way out

    const ProcessResult r = run_process(oncely_cli({"stats", "--json"}),
                                        EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    REQUIRE(r.exit_code == 0);
    const auto json = nlohmann::json::parse(r.out);
    REQUIRE(json["queues"].size() == 1);
    CHECK(json["queues"][0]["queue"] == "default");
    CHECK(json["queues"][0]["per_minute"]["15m"]["completed"].get<double>() * 15 == doctest::Approx(31));
    CHECK(json["queues"][0]["dead_letters"] == 2);
    CHECK(json["queues"][0]["failure_rate_5m"].get<double>() == doctest::Approx(3.0 / 34));
    CHECK(json["workers"].empty());

    const ProcessResult text =
        run_process(oncely_cli({"stats"}), EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    CHECK(text.exit_code == 0);
    CHECK(text.out.find("queue default") != std::string::npos);
    CHECK(text.out.find("dead letters  2") != std::string::npos);
  }

  TEST_CASE("check: exit codes 0, 1, 2 from the thresholds, 3 when the database cannot be reached") {
    PgFixture db;
    const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
    ProcessResult r = run_process(oncely_cli({"check"}), env);
    CHECK(r.exit_code == 0);
    CHECK(r.out.starts_with("OK: "));

    db.exec("INSERT INTO " + db.table("dead_letters") +
            " (job_id, queue, kind, payload, priority, attempts, error_class, created_at) "
            "SELECT i, 'payments', 'charge', '{}', 0, 1, 'permanent', now() FROM generate_series(1, 11) AS i");
    r = run_process(oncely_cli({"check"}), env);
    CHECK(r.exit_code == 2);
    CHECK(r.out == "CRITICAL: queue payments has 11 dead letters (> 10)\n");
    r = run_process(oncely_cli({"check", "--dead-letters-critical", "20", "--dead-letters-warning", "5"}), env);
    CHECK(r.exit_code == 1);
    CHECK(r.out == "WARNING: queue payments has 11 dead letters (> 5)\n");

    r = run_process(oncely_cli({"check"}), EnvChanges{{"DATABASE_URL", "postgresql://u:hunter22@127.0.0.1:1/x"}});
    CHECK(r.exit_code == 3);
    CHECK(r.out.starts_with("UNKNOWN: cannot connect to postgresql://u:***@127.0.0.1:1/x"));
    CHECK(r.out.find("hunter22") == std::string::npos);
  }

  TEST_CASE("check: critical with more than 10 dead letters, ok again once they are replayed and processed") {
    PgFixture db;
    const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
    // A bug in the handler dead-letters 12 jobs...
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, idempotency_key) SELECT 'charge', 'pay-' || i FROM generate_series(1, 12) AS i");
    EventRecorder events;
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    bool fixed = false;
    {
      oncely::Runtime runtime(
          config, oncely::RuntimeOptions{.logger = log, .on_event = events.callback(), .handle_signals = false});
      runtime.handle("charge", [&](oncely::JobContext&) {
        if (!fixed) throw oncely::PermanentError("NullPointerException in charge()");
      });
      RunningRuntime running(runtime);
      REQUIRE(events.wait_for(Outcome::dead_lettered, 12, 20s));
    }
    ProcessResult r = run_process(oncely_cli({"check"}), env);
    CHECK(r.exit_code == 2);
    CHECK(r.out ==
          "CRITICAL: queue default has 12 dead letters (> 10)\n"
          "WARNING: queue default failure rate 100.0 % over the last 5 minutes (> 1.0 %)\n");

    // ...the bug is fixed, the dead letters replayed (twice: the second does nothing) and processed.
    r = run_process(oncely_cli({"dlq", "replay", "--error", "NullPointerException"}), env);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_process(oncely_cli({"dlq", "replay", "--error", "NullPointerException"}), env);
    REQUIRE(r.exit_code == 0);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 12);
    fixed = true;
    {
      oncely::Runtime runtime(
          config, oncely::RuntimeOptions{.logger = log, .on_event = events.callback(), .handle_signals = false});
      runtime.handle("charge", [&](oncely::JobContext&) {
        if (!fixed) throw oncely::PermanentError("NullPointerException in charge()");
      });
      RunningRuntime running(runtime);
      REQUIRE(events.wait_for(Outcome::completed, 12, 20s));
    }
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0);
    r = run_process(oncely_cli({"check", "--failure-rate-warning", "100"}), env);  // the bug's failures are recent
    CHECK_MESSAGE(r.exit_code == 0, r.out);
    CHECK(r.out.starts_with("OK: "));
  }

}  // TEST_SUITE
