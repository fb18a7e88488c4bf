#pragma once
// LookBacks: which of the process's queues the listener asks to look back (claim once from
// the head), and when. An INSERT skips its NOTIFY while one for the same queues is on its
// way (store/wakeup_window.hpp); a skipped job that commits after the claim the NOTIFY
// caused, with an id before the jobs that claim took, is before the queue's claim start
// (execution/claim_start.hpp), where only a claim from the head finds it. So a queue is
// due to look back WakeupWindow::kFollowUp after the last notification naming it, and
// looks only if the trigger's count of skipped NOTIFYs moved since it last did: a queue
// that gets one job now and then costs one claim per job, not two.
//
// Pure bookkeeping for the listener's thread: it passes the time and the count it read.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace oncely::detail {

class LookBacks {
 public:
  using Clock = std::chrono::steady_clock;

  /// `queues`: the process's queues (notifications name every queue of the schema).
  explicit LookBacks(const std::vector<std::string>& queues);

  /// A notification named `queue` ("*": every queue) at `now`.
  void notified(const std::string& queue, Clock::time_point now);
  /// When the next queue is due (nullopt: none is).
  [[nodiscard]] std::optional<Clock::time_point> next_due() const;
  /// The queues due at `now` that should look back, given the count of skipped NOTIFYs
  /// read now (nullopt: it could not be read, so every queue due looks).
  std::vector<std::string> take_due(Clock::time_point now, std::optional<std::int64_t> skipped);

 private:
  struct Queue {
    std::optional<Clock::time_point> due;
    std::optional<std::int64_t> skipped_when_looked;  // the count at its last decision
  };
  std::map<std::string, Queue> queues_;
};

}  // namespace oncely::detail
