// Queue isolation and per-queue rate limits.
#include <doctest/doctest.h>

#include <thread>

#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

TEST_SUITE("queues") {
  TEST_CASE("queues: a flooded slow queue does not delay another queue") {
    PgFixture db;
    // 300 jobs of 200 ms at concurrency 1: a minute of work queued ahead...
    db.exec("INSERT INTO " + db.table("jobs") + " (queue, kind) SELECT 'bulk', 'slow' FROM generate_series(1, 300)");
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    config.queues = {{"bulk", oncely::QueueConfig{.concurrency = 1}},
                     {"critical", oncely::QueueConfig{.concurrency = 1}}};
    EventRecorder events;
    oncely::Runtime runtime(config, errors_only_options(events));
    runtime.handle("slow", [](oncely::JobContext&) { std::this_thread::sleep_for(200ms); });
    runtime.handle("fast", [](oncely::JobContext&) {});
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::completed, 1, 10s));  // the bulk queue is busy
    // ...and 20 jobs on another queue arrive behind it.
    const auto enqueued = std::chrono::steady_clock::now();
    db.exec("INSERT INTO " + db.table("jobs") + " (queue, kind) SELECT 'critical', 'fast' FROM generate_series(1, 20)");
    REQUIRE(wait_until(
        [&] {
          const auto e = events.events();
          return std::count_if(e.begin(), e.end(), [](const auto& x) { return x.queue == "critical"; }) == 20;
        },
        10s));
    const auto took = std::chrono::steady_clock::now() - enqueued;
    MESSAGE("20 critical jobs done " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                     << " ms after enqueue, with "
                                     << db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") +
                                                        " WHERE queue = 'bulk'")
                                     << " bulk jobs still waiting");
    CHECK(took < 3s);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE queue = 'bulk'") > 250);
  }

  TEST_CASE("queues: rate_limit_per_sec caps job starts per second in the process") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) SELECT 'tick' FROM generate_series(1, 60)");
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    config.queues = {{"default", oncely::QueueConfig{.concurrency = 4, .rate_limit_per_sec = 20}}};
    EventRecorder events;
    std::mutex mutex;
    std::vector<std::chrono::steady_clock::time_point> starts;
    oncely::Runtime runtime(config, errors_only_options(events));
    runtime.handle("tick", [&](oncely::JobContext&) {
      std::lock_guard lock(mutex);
      starts.push_back(std::chrono::steady_clock::now());
    });
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::completed, 60, 20s));
    running.stop();
    // A burst of one second's worth (20), then 20 per second: the 60th token is taken no
    // sooner than 2 s after the first. The limiter bounds the takes; a handler starts after
    // its thread's claim round trip, which on a loaded machine varies by up to kStartLag
    // between threads (CI: 60 starts in 1,891 ms, 42 in one second), so the starts are
    // held to the rate over a window that much longer. Without the limit, all 60 start
    // within a few milliseconds.
    constexpr auto kStartLag = 200ms;
    std::sort(starts.begin(), starts.end());
    const auto span = starts.back() - starts.front();
    MESSAGE("60 starts took " << std::chrono::duration_cast<std::chrono::milliseconds>(span).count() << " ms");
    CHECK(span >= 2s - kStartLag);
    CHECK(span < 4s);
    // No one-second window holds more than the burst plus the rate over 1 s + kStartLag.
    for (std::size_t i = 0; i < starts.size(); ++i) {
      const auto in_window = std::count_if(starts.begin() + static_cast<long>(i), starts.end(),
                                           [&](const auto& t) { return t - starts[i] < 1s; });
      CHECK(in_window <= 20 + 20 * 1.2);
    }
  }

}  // TEST_SUITE
