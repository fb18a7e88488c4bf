#include "process/look_backs.hpp"

#include "store/wakeup_window.hpp"

namespace oncely::detail {

LookBacks::LookBacks(const std::vector<std::string>& queues) {
  for (const std::string& q : queues) queues_.emplace(q, Queue{});
}

void LookBacks::notified(const std::string& queue, Clock::time_point now) {
  const auto due = now + WakeupWindow::kFollowUp;
  if (queue == "*") {
    for (auto& [name, q] : queues_) q.due = due;
  } else if (const auto it = queues_.find(queue); it != queues_.end()) {
    it->second.due = due;
  }
}

std::optional<LookBacks::Clock::time_point> LookBacks::next_due() const {
  std::optional<Clock::time_point> next;
  for (const auto& [name, q] : queues_) {
    if (q.due && (!next || *q.due < *next)) next = q.due;
  }
  return next;
}

std::vector<std::string> LookBacks::take_due(Clock::time_point now, std::optional<std::int64_t> skipped) {
  std::vector<std::string> look;
  for (auto& [name, q] : queues_) {
    if (!q.due || *q.due > now) continue;
    q.due.reset();
    // Unknown either side: look (a claim too many costs less than a job left to the poll).
    if (!skipped || !q.skipped_when_looked || *q.skipped_when_looked != *skipped) look.push_back(name);
    q.skipped_when_looked = skipped;
  }
  return look;
}

}  // namespace oncely::detail
