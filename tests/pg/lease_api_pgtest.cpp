// The C++ API of lease mode, in process: on_complete() effects applied exactly once with the
// completion, tx() refused with a clear message, lease_mode(), and the events a lease
// queue reports.
#include <doctest/doctest.h>

#include <condition_variable>
#include <mutex>

#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

oncely::QueueConfig lease_queue() {
  oncely::QueueConfig queue{.concurrency = 8, .max_attempts = 2};
  queue.mode = oncely::QueueConfig::Mode::lease;
  queue.lease = 3s;
  queue.poll_interval = 100ms;
  queue.backoff.schedule = {std::chrono::milliseconds(0)};
  return queue;
}

}  // namespace

TEST_CASE("lease api: on_complete() effects commit with the completion; tx() is refused, naming on_complete") {
  PgFixture db;
  create_balances(db);
  db.exec("INSERT INTO " + db.table("jobs") +
          " (kind, payload) SELECT 'credit', jsonb_build_object('account', i % 5, "
          "'cents', 1) FROM generate_series(1, 50) AS i");
  db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('uses_tx')");
  db.exec("INSERT INTO " + db.table("jobs") +
          " (kind, payload) VALUES ('effect_throws', '{\"account\": 1, \"cents\": 1}')");
  const std::string balances = db.table("balances");
  const std::string upsert = "INSERT INTO " + balances +
                             " (account, cents) VALUES ($1, $2) ON CONFLICT (account) "
                             "DO UPDATE SET cents = " +
                             balances + ".cents + EXCLUDED.cents";
  EventRecorder events;
  oncely::Runtime runtime(config_for(db, lease_queue()), quiet_options(events));
  std::atomic<int> lease_mode_seen{0};
  runtime.handle("credit", [&](oncely::JobContext& job) {
    if (job.lease_mode() && !job.lease_lost()) lease_mode_seen.fetch_add(1);
    const long account = job.payload().at("account").get<long>();
    const long cents = job.payload().at("cents").get<long>();
    job.on_complete([&upsert, account, cents](pqxx::work& tx) { tx.exec_params(upsert, account, cents); });
  });
  runtime.handle("uses_tx", [](oncely::JobContext& job) { job.tx().exec("SELECT 1"); });
  // The effect's write is undone with it (its savepoint), and the attempt fails as if the
  // handler had thrown.
  runtime.handle("effect_throws", [&upsert](oncely::JobContext& job) {
    job.on_complete([&upsert](pqxx::work& tx) {
      tx.exec_params(upsert, 1, 1000);
      throw std::runtime_error("the effect changed its mind");
    });
  });
  RunningRuntime running(runtime);
  REQUIRE(events.wait_for(Outcome::completed, 50, 20s));
  REQUIRE(events.wait_for(Outcome::dead_lettered, 2, 20s));
  running.stop();
  CHECK(lease_mode_seen == 50);
  CHECK(db.scalar<long>("SELECT sum(cents) FROM " + balances) == 50);
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs")) == 50);
  CHECK(db.scalar<std::string>("SELECT error_class || ': ' || last_error FROM " + db.table("dead_letters") +
                               " WHERE kind = 'uses_tx'")
            .starts_with("permanent: job.tx() on lease queue 'default': no transaction is open while a lease job runs; "
                         "register database effects with job.on_complete()"));
  CHECK(db.scalar<std::string>("SELECT error_class || ' ' || attempts || ': ' || last_error FROM " +
                               db.table("dead_letters") + " WHERE kind = 'effect_throws'") ==
        "exhausted 2: the effect changed its mind");
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0);
}

// A queue switched from lease mode to transaction mode while a lease was out: the
// transaction-mode retry must clear the lease, or the old lease's holder, still running,
// would find its token on the row and could complete (or retry) a job it no longer owns.
TEST_CASE("lease api: a transaction-mode retry clears the lease a lease queue left on the row") {
  PgFixture db;
  db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('fails_once')");
  db.exec("UPDATE " + db.table("jobs") + " SET lease_token = nextval('" + db.table("lease_tokens") +
          "'), attempts = 1, run_at = now()");
  oncely::QueueConfig queue{.concurrency = 1, .max_attempts = 3};
  queue.poll_interval = 100ms;
  queue.backoff.schedule = {std::chrono::milliseconds(3'600'000)};
  EventRecorder events;
  oncely::Runtime runtime(config_for(db, queue), quiet_options(events));
  runtime.handle("fails_once", [](oncely::JobContext&) { throw std::runtime_error("not yet"); });
  RunningRuntime running(runtime);
  REQUIRE(events.wait_for(Outcome::retried, 1, 20s));
  running.stop();
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") +
                        " WHERE attempts = 2 AND lease_token IS NULL AND leased_by IS NULL") == 1);
}

// Handler threads wake one another as they take jobs (a thread whose job ended takes the
// next one itself, and only one wake-up is on its way at a time): every job of a claim
// still starts at once when none of them ends, on threads new and reused alike.
TEST_CASE("lease api: 200 jobs that each wait for all the others all run at once, twice over") {
  PgFixture db;
  constexpr int kWave = 200;
  oncely::QueueConfig queue = lease_queue();
  queue.concurrency = kWave;
  queue.batch_size = kWave;
  std::mutex mutex;  // before the runtime: its handlers use them until it is gone
  std::condition_variable all_started;
  int started = 0;
  int saw_all = 0;
  EventRecorder events;
  oncely::Runtime runtime(config_for(db, queue), quiet_options(events));
  runtime.handle("barrier", [&](oncely::JobContext& job) {
    const int wave = job.payload().at("wave").get<int>();
    std::unique_lock lock(mutex);
    ++started;
    all_started.notify_all();
    if (all_started.wait_for(lock, 20s, [&] { return started >= wave * kWave; })) ++saw_all;
  });
  RunningRuntime running(runtime);
  for (int wave = 1; wave <= 2; ++wave) {
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, payload) SELECT 'barrier', jsonb_build_object('wave', " +
            std::to_string(wave) + ") FROM generate_series(1, " + std::to_string(kWave) + ")");
    REQUIRE(events.wait_for(Outcome::completed, wave * kWave, 30s));
    std::lock_guard lock(mutex);
    CHECK(saw_all == wave * kWave);
  }
  running.stop();
}

// An on_complete effect that commits the completion's transaction itself: the commit guard
// refuses it as it does a transaction-mode handler's COMMIT, so its write is undone with the
// rest of that transaction and the job is a permanent dead letter saying why; the jobs
// settled beside it complete once, and none of them is taken for a duplicate.
TEST_CASE("lease api: an on_complete effect that runs COMMIT is refused; its write is undone") {
  PgFixture db;
  create_balances(db);
  const std::string jobs = db.table("jobs");
  db.exec("INSERT INTO " + jobs +
          " (kind, idempotency_key, payload) SELECT CASE WHEN i = 10 THEN 'commits' ELSE "
          "'credit' END, 'k-' || i, jsonb_build_object('account', i, 'cents', 1) FROM generate_series(1, 20) AS i");
  const std::string balances = db.table("balances");
  EventRecorder events;
  oncely::Runtime runtime(config_for(db, lease_queue()), quiet_options(events));
  const auto credit = [balances](long account, long cents) {
    return [balances, account, cents](pqxx::work& tx) {
      tx.exec_params("INSERT INTO " + balances + " (account, cents) VALUES ($1, $2)", account, cents);
    };
  };
  runtime.handle("credit",
                 [&](oncely::JobContext& job) { job.on_complete(credit(job.payload().at("account").get<long>(), 1)); });
  runtime.handle("commits", [&](oncely::JobContext& job) {
    job.on_complete([effect = credit(job.payload().at("account").get<long>(), 1000)](pqxx::work& tx) {
      effect(tx);
      tx.exec("COMMIT");
    });
  });
  RunningRuntime running(runtime);
  REQUIRE(wait_until([&] { return db.scalar<long>("SELECT count(*) FROM " + jobs) == 0; }, 30s));
  running.stop();
  CHECK(db.scalar<long>("SELECT count(*) FROM " + balances + " WHERE account = 10") == 0);
  CHECK(db.scalar<long>("SELECT count(*) FROM " + balances) == 19);
  CHECK(db.scalar<long>("SELECT sum(cents) FROM " + balances) == 19);
  CHECK(events.count(Outcome::deduplicated) == 0);
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs")) == 19);
  CHECK(db.scalar<std::string>("SELECT error_class FROM " + db.table("dead_letters") +
                               " WHERE idempotency_key = 'k-10'") == "permanent");
  CHECK(db.scalar<std::string>("SELECT last_error FROM " + db.table("dead_letters") + " WHERE idempotency_key = 'k-10'")
            .find("committed by its handler") != std::string::npos);
}
