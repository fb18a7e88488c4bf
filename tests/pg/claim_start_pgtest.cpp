// Where a queue's claims start (execution/claim_start.hpp), with a real runtime and a real
// held-back xmin horizon: claims go on after the furthest job claimed, and a job that
// belongs before that point is still found by a claim from the head.
#include <doctest/doctest.h>

#include <thread>

#include <pqxx/pqxx>

#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

// One job at a time, so that claims come back partial and the start moves with them; then
// two jobs that belong before the start: one an hour earlier in run_at (a producer
// transaction that stayed open), one at a more urgent priority level than any claimed so
// far. All run, each once.
void jobs_before_the_start_run(const oncely::QueueConfig& queue) {
  PgFixture db;
  const std::string jobs = db.table("jobs");
  // An idle transaction that took an xid: vacuum removes nothing while it is open.
  pqxx::connection pin_conn{db.url};
  pqxx::work pin{pin_conn};
  pin.exec("SELECT txid_current()");

  EventRecorder events;
  oncely::Runtime runtime(config_for(db, queue), quiet_options(events));
  runtime.handle("noop", [](oncely::JobContext&) {});
  std::jthread runner([&] { runtime.run(); });

  constexpr int kJobs = 150;
  for (int i = 1; i <= kJobs; ++i) {
    db.exec("INSERT INTO " + jobs + " (kind, idempotency_key) VALUES ('noop', 'k-" + std::to_string(i) + "')");
    REQUIRE(events.wait_for(Outcome::completed, static_cast<std::size_t>(i), 10s));
  }
  db.exec("INSERT INTO " + jobs +
          " (kind, idempotency_key, run_at) VALUES ('noop', 'earlier', now() - interval '1 hour')");
  db.exec("INSERT INTO " + jobs + " (kind, idempotency_key, priority) VALUES ('noop', 'urgent', -5)");
  CHECK(events.wait_for(Outcome::completed, kJobs + 2, 10s));
  CHECK(db.scalar<long>("SELECT count(*) FROM " + jobs) == 0);
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs")) == kJobs + 2);
  CHECK(events.count(Outcome::completed) == kJobs + 2);
  runtime.request_stop();
}

}  // namespace

TEST_SUITE("claim_start") {
  TEST_CASE(
      "claim_start: under a held xmin, jobs before the claims' start still run: an earlier run_at, a more urgent "
      "level") {
    oncely::QueueConfig queue;
    queue.concurrency = 3;
    jobs_before_the_start_run(queue);
  }

  TEST_CASE("claim_start: the same on a lease queue") {
    oncely::QueueConfig queue;
    queue.mode = oncely::QueueConfig::Mode::lease;
    queue.concurrency = 3;
    jobs_before_the_start_run(queue);
  }

}  // TEST_SUITE
