// The overview's shared snapshot: when a request counts, serves, or waits (pure), and that
// requests within the interval share one count while a count in progress is not repeated.

#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <thread>

#include "oncely/errors.hpp"
#include "web/stats_snapshot.hpp"

using namespace oncely;
using namespace oncely::web;
using namespace std::chrono_literals;

TEST_CASE("web: the overview snapshot is counted once per interval, never twice at a time") {
  CHECK(next_step(false, 0ms, false, 5000ms) == SnapshotStep::count);
  CHECK(next_step(false, 0ms, true, 5000ms) == SnapshotStep::wait);
  CHECK(next_step(true, 4999ms, false, 5000ms) == SnapshotStep::serve);
  CHECK(next_step(true, 5000ms, false, 5000ms) == SnapshotStep::count);
  CHECK(next_step(true, 60000ms, true, 5000ms) == SnapshotStep::serve);  // stale, but someone counts
  CHECK(snapshot_fresh_for(1) == 1s);
  CHECK(snapshot_fresh_for(0) == 5s);  // live refresh off
}

TEST_CASE("web: requests within the interval share one count; a failed count is the counter's error only") {
  std::atomic<int> counts{0};
  bool fail = false;
  StatsSnapshot snapshot(
      [&] {
        ++counts;
        if (fail) throw DatabaseError("down");
        Stats s;
        s.queues.push_back(QueueStats{});
        s.queues.back().queue = "q" + std::to_string(counts.load());
        return s;
      },
      60s);
  CHECK(snapshot.get().stats->queues.at(0).queue == "q1");
  CHECK(snapshot.get().stats->queues.at(0).queue == "q1");
  CHECK(counts == 1);

  StatsSnapshot always(
      [&] {
        ++counts;
        if (fail) throw DatabaseError("down");
        return Stats{};
      },
      0ms);
  fail = true;
  CHECK_THROWS_AS((void)always.get(), DatabaseError);
  fail = false;
  (void)always.get();  // no snapshot was kept from the failure: counted again
  CHECK(counts == 3);
}

TEST_CASE("web: requests arriving while the first count runs wait for it instead of counting too") {
  std::atomic<int> counts{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  StatsSnapshot snapshot(
      [&] {
        ++counts;
        released.wait();
        return Stats{};
      },
      60s);
  auto first = std::async(std::launch::async, [&] { return snapshot.get().stats; });
  while (counts.load() == 0) std::this_thread::yield();
  auto second = std::async(std::launch::async, [&] { return snapshot.get().stats; });
  CHECK(second.wait_for(50ms) == std::future_status::timeout);  // waiting, not counting
  release.set_value();
  CHECK(first.get() == second.get());
  CHECK(counts == 1);
}
