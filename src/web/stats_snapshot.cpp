#include "web/stats_snapshot.hpp"

#include <algorithm>

namespace oncely::web {

SnapshotStep next_step(bool have_snapshot, std::chrono::milliseconds age, bool counting,
                       std::chrono::milliseconds fresh_for) {
  if (!have_snapshot) return counting ? SnapshotStep::wait : SnapshotStep::count;
  // A stale snapshot is served while another request counts: one count at a time, and no
  // request queues behind it.
  if (age < fresh_for || counting) return SnapshotStep::serve;
  return SnapshotStep::count;
}

std::chrono::seconds snapshot_fresh_for(int refresh_seconds) {
  return std::chrono::seconds(refresh_seconds > 0 ? refresh_seconds : 5);
}

Stats stats_for_queue(const Stats& all, const std::string& queue) {
  Stats one;
  for (const QueueStats& q : all.queues) {
    if (q.queue == queue) one.queues.push_back(q);
  }
  for (const WorkerInfo& w : all.workers) {
    if (std::find(w.queues.begin(), w.queues.end(), queue) != w.queues.end()) one.workers.push_back(w);
  }
  return one;
}

StatsSnapshot::StatsSnapshot(Read read, std::chrono::milliseconds fresh_for)
    : read_(std::move(read)), fresh_for_(fresh_for) {}

StatsSnapshot::View StatsSnapshot::get() {
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto age = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - counted_at_); };
    switch (next_step(stats_ != nullptr, stats_ ? age() : std::chrono::milliseconds(0), counting_, fresh_for_)) {
      case SnapshotStep::serve: return View{stats_, age()};
      case SnapshotStep::wait:
        // Bounded by the counting request's statement_timeout; if it fails, the loop
        // finds no snapshot and nobody counting, and this request counts.
        counted_.wait(lock);
        continue;
      case SnapshotStep::count: {
        counting_ = true;
        const Clock::time_point started = Clock::now();
        lock.unlock();
        std::shared_ptr<const Stats> fresh;
        try {
          fresh = std::make_shared<const Stats>(read_());
        } catch (...) {
          lock.lock();
          counting_ = false;
          counted_.notify_all();
          throw;
        }
        lock.lock();
        stats_ = std::move(fresh);
        counted_at_ = started;  // the numbers are as of the count's start
        counting_ = false;
        counted_.notify_all();
        return View{stats_, age()};
      }
    }
  }
}

}  // namespace oncely::web
