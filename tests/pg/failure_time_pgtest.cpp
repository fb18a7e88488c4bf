// A failure is recorded at the time it happened, not at the start of its batch's
// transaction: failed_at, errors[].at and a retry's run_at used now(), the claim's time,
// so a job that timed out after 3 s showed a failed_at 3 s before the log line reporting
// the timeout, and its backoff was shortened by its run time.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

// Longer than the queue's job_timeout (1s): the executor's own deadline check fails it
// after it returns, inside the claim's transaction.
void overrun(oncely::JobContext&) { std::this_thread::sleep_for(1200ms); }

}  // namespace

TEST_CASE("failure time: a timed-out job's failed_at and errors[].at are when it failed, not when it was claimed") {
  PgFixture db;
  db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('slow', 1)");
  EventRecorder events;
  oncely::Runtime runtime(config_for(db, {.job_timeout = 1s}), quiet_options(events));
  runtime.handle("slow", overrun);
  RunningRuntime running(runtime);
  REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
  running.stop();
  // Claimed within moments of its creation, failed 1.2 s into its run.
  CHECK(db.scalar<std::string>("SELECT error_class FROM " + db.table("dead_letters")) == "timeout");
  CHECK(db.scalar<double>("SELECT extract(epoch FROM failed_at - created_at) FROM " + db.table("dead_letters")) >= 1.2);
  CHECK(db.scalar<double>("SELECT extract(epoch FROM (errors->0->>'at')::timestamptz - created_at) FROM " +
                          db.table("dead_letters")) >= 1.2);
}

TEST_CASE("failure time: a retry waits its backoff from the failure, not from the claim") {
  PgFixture db;
  db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('slow', 2)");
  EventRecorder events;
  oncely::QueueConfig queue{.job_timeout = 1s};
  queue.backoff.schedule = {std::chrono::milliseconds(30s)};
  oncely::Runtime runtime(config_for(db, queue), quiet_options(events));
  runtime.handle("slow", overrun);
  RunningRuntime running(runtime);
  REQUIRE(events.wait_for(Outcome::retried, 1, 15s));
  running.stop();
  const std::string jobs = db.table("jobs");
  const double failed_s =
      db.scalar<double>("SELECT extract(epoch FROM (errors->0->>'at')::timestamptz - created_at) FROM " + jobs);
  CHECK(failed_s >= 1.2);
  CHECK(db.scalar<double>("SELECT extract(epoch FROM run_at - (errors->0->>'at')::timestamptz) FROM " + jobs) ==
        doctest::Approx(30.0));
}
