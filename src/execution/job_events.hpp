#pragma once
// What both executors do with the events of a committed transaction: count them for
// job_stats, and hand them to the embedder's on_event.

#include <functional>
#include <vector>

#include "oncely/values.hpp"
#include "store/records.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

/// The outcomes of a transaction's events, plus `crashed` unfinished attempts it counted
/// (crashed events are not counted again: the caller knows them from the attempt records).
OutcomeCounts count(const std::vector<JobEvent>& events, long crashed);

/// Calls `on_event` for each event; an exception it throws is logged, never passed on.
void emit(const std::function<void(const JobEvent&)>& on_event, spdlog::logger& log, const std::vector<JobEvent>& events);

}  // namespace oncely::detail
