#pragma once
// The overview's numbers, shared by every request. Counting the jobs of every queue is a
// scan of the jobs table (1,000,000 jobs: about half a second of a core), and every open
// tab asks again at each live refresh; so the console counts at most once per `fresh_for`
// (its refresh interval), however many tabs and viewers there are, the way Oban Web and
// Sidekiq's dashboard show shared counters rather than a count per viewer. The numbers stay
// exact (what `oncely stats` prints), and the page says how old they are.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "oncely/stats.hpp"

namespace oncely::web {

/// What a request does with the shared snapshot.
enum class SnapshotStep {
  serve,  ///< fresh enough, or another request is counting anew: serve the one there is
  count,  ///< count anew on this request (and serve that)
  wait,   ///< no snapshot yet and another request is counting it: wait for that one
};

/// The rule, pure: `age` of the snapshot there is (if any), whether a request is counting.
[[nodiscard]] SnapshotStep next_step(bool have_snapshot, std::chrono::milliseconds age, bool counting,
                                     std::chrono::milliseconds fresh_for);

/// How long a snapshot serves: the pages' live refresh interval, 5 s when that is off.
[[nodiscard]] std::chrono::seconds snapshot_fresh_for(int refresh_seconds);

/// Every queue's numbers for one queue's overview (collect_stats with a queue): its entry,
/// and the workers that serve it.
[[nodiscard]] Stats stats_for_queue(const Stats& all, const std::string& queue);

class StatsSnapshot {
 public:
  using Read = std::function<Stats()>;
  /// `read` counts (collect_stats); it runs on the thread of the request that counts.
  StatsSnapshot(Read read, std::chrono::milliseconds fresh_for);

  struct View {
    std::shared_ptr<const Stats> stats;
    std::chrono::milliseconds age{0};  ///< since the count began
  };
  /// The snapshot, counted anew first when next_step says so. From any thread. Throws what
  /// `read` throws, to the request that counted only (the others keep the old snapshot, or
  /// count in their turn when there is none).
  [[nodiscard]] View get();

 private:
  using Clock = std::chrono::steady_clock;
  Read read_;
  std::chrono::milliseconds fresh_for_;
  std::mutex mutex_;
  std::condition_variable counted_;
  std::shared_ptr<const Stats> stats_;
  Clock::time_point counted_at_;
  bool counting_ = false;
};

}  // namespace oncely::web
