#include "execution/job_events.hpp"

#include <spdlog/spdlog.h>

#include "support/duration.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {

JobEvent event_of(const ClaimedJob& job, std::string_view queue, int attempt, JobEvent::Outcome outcome) {
  JobEvent e;
  e.id = job.id;
  e.queue = queue;
  e.kind = job.kind;
  e.attempt = attempt;
  e.outcome = outcome;
  e.wait = std::chrono::microseconds(job.waited_us);
  e.trace_context = job.trace_context;
  e.key = job.idempotency_key;
  return e;
}

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

void log_job_line(spdlog::logger& log, const JobEvent& e) {
  using Outcome = JobEvent::Outcome;
  const auto level = e.outcome == Outcome::dead_lettered                                     ? spdlog::level::err
                     : e.outcome == Outcome::completed || e.outcome == Outcome::deduplicated ? spdlog::level::debug
                                                                                             : spdlog::level::warn;
  if (!log.should_log(level)) return;  // completions are at debug: not formatted unless asked for
  const std::string trace = trace_field(e.trace_context);
  switch (e.outcome) {
    case Outcome::completed:
      log.log(level, "job completed queue={} kind={} id={} attempt={}{} run_us={}", e.queue, e.kind, e.id, e.attempt,
              trace, e.run_time.count());
      break;
    case Outcome::deduplicated:
      log.log(level, "job duplicate: its key was processed already queue={} kind={} id={}{}", e.queue, e.kind, e.id,
              trace);
      break;
    case Outcome::retried:
      log.log(level, "job retry queue={} kind={} id={} attempt={}{} delay={} class={} error={}", e.queue, e.kind, e.id,
              e.attempt, trace, format_duration(e.retry_delay), e.error_class, e.error);
      break;
    case Outcome::dead_lettered:
      log.log(level, "job dead-lettered queue={} kind={} id={} attempt={}{} class={} error={}", e.queue, e.kind, e.id,
              e.attempt, trace, e.error_class, e.error);
      break;
    case Outcome::crashed:
      log.log(level, "job attempt never finished queue={} kind={} id={} attempt={}{} class={} error={}", e.queue,
              e.kind, e.id, e.attempt, trace, e.error_class, e.error);
      break;
    case Outcome::lease_stale:
      log.log(level,
              "lease stale: its lease was lost before the attempt finished, its outcome changed nothing queue={} "
              "kind={} id={} attempt={}{}",
              e.queue, e.kind, e.id, e.attempt, trace);
      break;
  }
}

void emit(const std::function<void(const JobEvent&)>& on_event, spdlog::logger& log,
          const std::vector<JobEvent>& events) {
  for (const JobEvent& e : events) log_job_line(log, e);
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
