// The first answer of /metrics already holds every queue x kind counter at 0, so an alert
// on a ratio works from the first scrape and the body is never empty; a queue whose every
// attempt fails shows failed = attempts while completed stays at 0.
#include <doctest/doctest.h>

#include <httplib.h>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

TEST_CASE("metrics: the first scrape has every queue x kind at 0; a queue failing everything is failed = attempts") {
  PgFixture db;
  EventRecorder events;
  oncely::Config config = config_for(db, {});
  config.queues["mail"] = {};
  auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  oncely::Runtime runtime(
      config,
      oncely::RuntimeOptions{
          .logger = log, .on_event = events.callback(), .handle_signals = false, .metrics_address = "127.0.0.1:0"});
  runtime.handle("charge", [](oncely::JobContext&) { throw oncely::PermanentError("card declined"); });
  runtime.handle("send", [](oncely::JobContext&) {});
  RunningRuntime running(runtime);
  REQUIRE(wait_until([&] { return runtime.metrics_port() > 0; }, 10s));
  httplib::Client http("127.0.0.1", runtime.metrics_port());
  const auto first = http.Get("/metrics");
  REQUIRE(first);
  CHECK(first->status == 200);
  INFO(first->body);
  CHECK_FALSE(first->body.empty());
  for (const char* queue : {"default", "mail"}) {
    for (const char* kind : {"charge", "send"}) {
      const std::string labels = std::string("{kind=\"") + kind + "\",queue=\"" + queue + "\"} 0\n";
      CHECK(first->body.find("oncely_jobs_completed_total" + labels) != std::string::npos);
      CHECK(first->body.find("oncely_job_attempts_total" + labels) != std::string::npos);
    }
  }

  db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('charge'), ('charge')");
  REQUIRE(events.wait_for(Outcome::dead_lettered, 2, 15s));
  const auto after = http.Get("/metrics");
  REQUIRE(after);
  INFO(after->body);
  CHECK(after->body.find("oncely_jobs_failed_total{kind=\"charge\",queue=\"default\"} 2\n") != std::string::npos);
  CHECK(after->body.find("oncely_job_attempts_total{kind=\"charge\",queue=\"default\"} 2\n") != std::string::npos);
  CHECK(after->body.find("oncely_jobs_completed_total{kind=\"charge\",queue=\"default\"} 0\n") != std::string::npos);
  running.stop();
}
