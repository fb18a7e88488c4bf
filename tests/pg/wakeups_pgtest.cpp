// The insert trigger's wake-up window (migration 0016) and the listener's side of it: an
// INSERT skips its NOTIFY while one for the same queues is on its way; the listener
// acknowledges what reached it and wakes each queue once more 10 ms later, so that a job
// whose NOTIFY was skipped still starts without waiting for the poll.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "oncely/runtime.hpp"
#include "process/listener.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/schema.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Outcome = oncely::JobEvent::Outcome;

namespace {

struct Collector : pqxx::notification_receiver {
  using pqxx::notification_receiver::notification_receiver;
  std::vector<std::string> payloads;
  void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
};

// Everything notified before the sentinel has arrived once it has (commit order).
std::vector<std::string> notified_until_sentinel(PgFixture& db, pqxx::connection& listener, Collector& collector) {
  db.exec("SELECT pg_notify(" + db.conn->quote(oncely::detail::jobs_channel(db.schema)) + ", 'sentinel')");
  REQUIRE(wait_until(
      [&] {
        listener.await_notification(0, 50000);
        return !collector.payloads.empty() && collector.payloads.back() == "sentinel";
      },
      5s));
  std::vector<std::string> got(collector.payloads.begin(), collector.payloads.end() - 1);
  collector.payloads.clear();
  return got;
}

std::shared_ptr<spdlog::logger> quiet() {
  return std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
}

}  // namespace

TEST_SUITE("wakeups") {
  TEST_CASE("wakeups: an INSERT skips its NOTIFY while one for the same queues is on its way, not after") {
    PgFixture db;
    pqxx::connection listener{db.url};
    Collector collector(listener, oncely::detail::jobs_channel(db.schema));
    const std::string insert = "INSERT INTO " + db.table("jobs") + " (kind) VALUES ('k')";
    const std::string acknowledge = "SELECT " + oncely::detail::quote_identifier(db.schema) + ".wakeup_received()";

    // Two enqueues in a row, each its own commit, sent in one round trip: one NOTIFY. The
    // window is 10 ms on the server's clock, in whole milliseconds; a pair that took 8 ms or
    // more here (a loaded machine) is tried again. The first COMMIT does not wait for its WAL
    // flush (synchronous_commit off, this session only): a flush slower than the window (CI
    // under load: every one of 20 pairs) would end the window it is about.
    db.exec("SET synchronous_commit = off");
    bool fast_enough = false;
    for (int attempt = 0; attempt < 20 && !fast_enough; ++attempt) {
      db.exec(acknowledge);
      const auto started = Clock::now();
      {
        pqxx::nontransaction tx{*db.conn};
        tx.exec(insert + "; COMMIT; " + insert);
      }
      fast_enough = Clock::now() - started < 8ms;
      const auto got = notified_until_sentinel(db, listener, collector);
      if (fast_enough) CHECK(got == std::vector<std::string>{"default"});
    }
    REQUIRE(fast_enough);

    // Another queue is not covered by the wake-up on its way.
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, queue) VALUES ('k', 'other')");
    CHECK(notified_until_sentinel(db, listener, collector) == std::vector<std::string>{"other"});

    // Once a listener acknowledged it, the next INSERT notifies at once.
    db.exec(insert);
    db.exec(acknowledge);
    db.exec(insert);
    CHECK(notified_until_sentinel(db, listener, collector) == std::vector<std::string>{"default", "default"});

    // Unacknowledged, the window closes by itself after 10 ms (the wait is the condition).
    db.exec(acknowledge);
    db.exec(insert);
    std::this_thread::sleep_for(15ms);
    db.exec(insert);
    CHECK(notified_until_sentinel(db, listener, collector) == std::vector<std::string>{"default", "default"});
  }

  TEST_CASE(
      "wakeups: the listener acknowledges what it received; a queue looks back 10 ms later when a NOTIFY was skipped") {
    PgFixture db;
    std::mutex mutex;
    std::vector<std::pair<std::string, Clock::time_point>> woken;
    const auto record = [&](const std::string& what) {
      std::lock_guard lock(mutex);
      woken.emplace_back(what, Clock::now());
    };
    oncely::detail::Listener listener(
        oncely::DatabaseUrl(db.url), db.schema, {"q1"}, quiet(), [&](const std::string& queue) { record(queue); },
        [&](const std::string& queue) { record("look back at " + queue); }, [] {});
    const auto calls = [&](const std::string& what) {
      std::lock_guard lock(mutex);
      return std::count_if(woken.begin(), woken.end(), [&](const auto& w) { return w.first == what; });
    };
    const auto at = [&](const std::string& what) {
      std::lock_guard lock(mutex);
      const auto it = std::find_if(woken.rbegin(), woken.rend(), [&](const auto& w) { return w.first == what; });
      REQUIRE(it != woken.rend());
      return it->second;
    };
    const auto last_value = [&](const std::string& sequence) {
      return db.scalar<long>("SELECT coalesce(pg_sequence_last_value(" + db.conn->quote(db.table(sequence)) +
                             "::regclass), 0)");
    };
    const std::string insert = "INSERT INTO " + db.table("jobs") + " (kind, queue) VALUES ('k', 'q1')";
    // The listener is LISTENing once a notification reaches it.
    REQUIRE(wait_until(
        [&] {
          db.exec("SELECT pg_notify(" + db.conn->quote(oncely::detail::jobs_channel(db.schema)) + ", 'probe')");
          return calls("probe") > 0;
        },
        5s));

    // The first notification: woken at once; 10 ms later it looks back (it never looked).
    db.exec(insert);
    REQUIRE(wait_until([&] { return calls("look back at q1") == 1; }, 5s));
    CHECK(at("look back at q1") - at("q1") >= 10ms);
    // The window the INSERT opened was closed by the listener, long before it would expire.
    CHECK(wait_until([&] { return last_value("wakeup_window") == 0; }, 5s));

    // Another job, no NOTIFY skipped since: woken, no look back. (Its absence is checked
    // after ten times its delay: a late listener could only hide a look back, not add one.)
    db.exec(insert);
    REQUIRE(wait_until([&] { return calls("q1") == 2; }, 5s));
    std::this_thread::sleep_for(100ms);
    CHECK(calls("look back at q1") == 1);

    // A NOTIFY skipped: the second INSERT commits while the first one's NOTIFY is held by
    // its open transaction, within 10 ms of it (a pair slower than 8 ms is tried again). The
    // 8 ms are the two INSERTs' triggers, not a COMMIT: a WAL flush can take longer than that.
    bool skipped = false;
    pqxx::connection first{db.url};
    pqxx::connection second{db.url};
    for (int attempt = 0; attempt < 20 && !skipped; ++attempt) {
      const long skips = last_value("wakeup_skips");
      const auto woken_before = calls("q1");
      pqxx::work tx{first};
      pqxx::work tx2{second};
      const auto started = Clock::now();
      tx.exec(insert);
      tx2.exec(insert);
      const bool fast = Clock::now() - started < 8ms;
      tx2.commit();
      tx.commit();
      skipped = fast && last_value("wakeup_skips") == skips + 1;
      REQUIRE(wait_until([&] { return calls("q1") > woken_before; }, 5s));
    }
    REQUIRE(skipped);
    CHECK(wait_until([&] { return calls("look back at q1") == 2; }, 5s));
    listener.request_stop();
  }

  TEST_CASE("wakeups: four producers enqueueing at once: every job starts, none waits for the poll") {
    PgFixture db;
    EventRecorder events;
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    config.queues["default"].concurrency = 8;
    config.queues["default"].poll_interval = 1h;  // a job left to the poll fails the test
    oncely::Runtime runtime(
        config, oncely::RuntimeOptions{.logger = quiet(), .on_event = events.callback(), .handle_signals = false});
    runtime.handle("noop", [](oncely::JobContext&) {});
    RunningRuntime running(runtime);
    // Started: its LISTEN is in place once a job enqueued now runs.
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('noop')");
    REQUIRE(events.wait_for(Outcome::completed, 1, 10s));

    constexpr int kProducers = 4;
    constexpr int kEach = 200;
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([&] {
        pqxx::connection conn{db.url};
        for (int i = 0; i < kEach; ++i) {
          pqxx::nontransaction tx{conn};
          tx.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('noop')");
        }
      });
    }
    for (auto& t : producers) t.join();
    CHECK(events.wait_for(Outcome::completed, 1 + kProducers * kEach, 20s));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0);
    running.stop();
  }

}  // TEST_SUITE
