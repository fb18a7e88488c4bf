#pragma once
// What both executors do with the events of a transaction: make them (one way, whichever
// mode), count them for job_stats, and once it has committed, log each job's line and hand
// the event to the embedder's on_event. Every "job completed / retry / dead-lettered" line
// is made here, from the committed event, so both modes print the same lines.

#include <functional>
#include <string_view>
#include <vector>

#include "oncely/values.hpp"
#include "store/records.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

/// An event of `job`'s attempt number `attempt` (0 for a duplicate) in `queue`.
[[nodiscard]] JobEvent event_of(const ClaimedJob& job, std::string_view queue, int attempt, JobEvent::Outcome outcome);

/// The outcomes of a transaction's events, plus `crashed` unfinished attempts it counted
/// (crashed events are not counted again: the caller knows them from the attempt records).
OutcomeCounts count(const std::vector<JobEvent>& events, long crashed);

/// Logs `event`'s job line at its outcome's level: dead letters at error; retries, crashed
/// attempts and stale leases at warn; completions and duplicates at debug.
void log_job_line(spdlog::logger& log, const JobEvent& event);

/// After the transaction that wrote `events` committed: logs each one's job line, then calls
/// `on_event` for it; an exception it throws is logged, never passed on.
void emit(const std::function<void(const JobEvent&)>& on_event, spdlog::logger& log,
          const std::vector<JobEvent>& events);

}  // namespace oncely::detail
