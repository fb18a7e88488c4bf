#include <doctest/doctest.h>

#include <httplib.h>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

/// The claim statements the worker behind `port` has timed (oncely_claim_seconds_count).
long claim_count(int port, const std::string& queue = "default") {
  httplib::Client http("127.0.0.1", port);
  const auto res = http.Get("/metrics");
  REQUIRE(res);
  const std::string line = "oncely_claim_seconds_count{queue=\"" + queue + "\"} ";
  const auto at = res->body.find(line);
  REQUIRE(at != std::string::npos);
  return std::stol(res->body.substr(at + line.size()));
}

}  // namespace

TEST_SUITE("metrics") {
  TEST_CASE("metrics: after a known workload /metrics shows exactly the expected counters") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, idempotency_key) SELECT 'email', 'k-' || (i % 5) FROM generate_series(0, 6) AS i");
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('charge'), ('charge'), ('charge')");
    EventRecorder events;
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    config.queues["default"].backoff.schedule = {10ms};
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    oncely::RuntimeOptions options{log, events.callback(), false, "127.0.0.1:0"};
    oncely::Runtime runtime(config, options);
    runtime.handle("email", [](oncely::JobContext&) {});
    runtime.handle("charge", [](oncely::JobContext& job) {
      if (job.id() % 3 == 0) throw oncely::PermanentError("card declined");
      if (job.attempt() == 1) throw std::runtime_error("gateway timeout");
    });
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 20s));
    REQUIRE(wait_until([&] { return runtime.metrics_port() > 0; }, 5s));
    // Which charge ids fail permanently depends on the ids; count what the database says.
    const long permanent = db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters"));
    const long charges_ok = 3 - permanent;
    // Outcomes are reported just after their commit: wait for the last ones (the metrics see
    // each event before the recorder does).
    REQUIRE(events.wait_for(Outcome::completed, static_cast<std::size_t>(5 + charges_ok), 5s));
    REQUIRE(events.wait_for(Outcome::dead_lettered, static_cast<std::size_t>(permanent), 5s));

    httplib::Client http("127.0.0.1", runtime.metrics_port());
    const auto res = http.Get("/metrics");
    REQUIRE(res);
    CHECK(res->status == 200);
    const std::string& body = res->body;
    const auto has = [&](const std::string& line) {
      CAPTURE(line);
      CHECK(body.find(line + "\n") != std::string::npos);
    };
    has("oncely_jobs_completed_total{kind=\"email\",queue=\"default\"} 5");
    has("oncely_jobs_deduplicated_total{kind=\"email\",queue=\"default\"} 2");
    has("oncely_jobs_completed_total{kind=\"charge\",queue=\"default\"} " + std::to_string(charges_ok));
    has("oncely_jobs_retried_total{kind=\"charge\",queue=\"default\"} " + std::to_string(charges_ok));
    has("oncely_jobs_dead_lettered_total{kind=\"charge\",queue=\"default\"} " + std::to_string(permanent));
    has("oncely_jobs_failed_total{kind=\"charge\",queue=\"default\"} " + std::to_string(charges_ok + permanent));
    has("oncely_job_run_seconds_count{kind=\"email\",queue=\"default\"} 5");
    has("oncely_job_wait_seconds_count{kind=\"email\",queue=\"default\"} 5");
    // Every claim statement is timed, so at least the ones that claimed these jobs.
    CHECK(claim_count(runtime.metrics_port()) >= 1);

    const auto health = http.Get("/healthz");
    REQUIRE(health);
    CHECK(health->status == 200);
    const auto ready = http.Get("/readyz");
    REQUIRE(ready);
    CHECK(ready->status == 200);
    running.stop();
  }

  // A thread whose batch came back short used to claim again at once, finding nothing: two
  // claims per job on a queue that keeps up. Now it waits for the next NOTIFY.
  TEST_CASE("claims: a job enqueued at an idle queue costs one claim, not a second empty one") {
    PgFixture db;
    EventRecorder events;
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    config.queues["default"].concurrency = 4;
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    oncely::Runtime runtime(
        config,
        oncely::RuntimeOptions{
            .logger = log, .on_event = events.callback(), .handle_signals = false, .metrics_address = "127.0.0.1:0"});
    runtime.handle("noop", [](oncely::JobContext&) {});
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return runtime.metrics_port() > 0; }, 5s));
    constexpr int kJobs = 30;
    for (int i = 1; i <= kJobs; ++i) {
      db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('noop')");
      REQUIRE(events.wait_for(Outcome::completed, static_cast<std::size_t>(i), 10s));
    }
    // One claim per job, plus each thread's first claims (one job, then the next claim and
    // a peer woken while it runs: about 11 here) and a poll or two per thread (1 s apart);
    // claiming again after every job made it 67.
    const long claims = claim_count(runtime.metrics_port());
    CAPTURE(claims);
    CHECK(claims >= kJobs);
    CHECK(claims <= kJobs + 20);
    running.stop();
  }

  TEST_CASE("metrics: a malformed --metrics-addr is refused at start-up") {
    PgFixture db;
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    oncely::Runtime runtime(
        config, oncely::RuntimeOptions{
                    .logger = log, .on_event = nullptr, .handle_signals = false, .metrics_address = "localhost"});
    CHECK_THROWS_AS(runtime.run(), oncely::ConfigError);
  }

}  // TEST_SUITE
