#include "execution/job_events.hpp"

#include <spdlog/spdlog.h>

namespace oncely::detail {

OutcomeCounts count(const std::vector<JobEvent>& events, long crashed) {
  OutcomeCounts c;
  c.crashed = crashed;
  for (const JobEvent& e : events) {
    switch (e.outcome) {
      case JobEvent::Outcome::completed:
        ++c.completed;
        c.run_time_us += e.run_time.count();
        break;
      case JobEvent::Outcome::deduplicated: ++c.deduplicated; break;
      case JobEvent::Outcome::retried: ++c.retried; break;
      case JobEvent::Outcome::dead_lettered: ++c.dead_lettered; break;
      case JobEvent::Outcome::crashed: break;      // counted by the caller
      case JobEvent::Outcome::lease_stale: break;  // changed nothing in the database
    }
  }
  return c;
}

void emit(const std::function<void(const JobEvent&)>& on_event, spdlog::logger& log, const std::vector<JobEvent>& events) {
  if (!on_event) return;
  for (const JobEvent& e : events) {
    try {
      on_event(e);
    } catch (const std::exception& ex) {
      log.warn("on_event callback threw: {}", ex.what());
    } catch (...) {
      log.warn("on_event callback threw an unknown exception");
    }
  }
}

}  // namespace oncely::detail
