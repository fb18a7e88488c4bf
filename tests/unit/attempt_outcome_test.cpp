// A failed attempt's plan (plan_failure: given the schema's decision, the record, the event) and the
// job line its committed event gives (log_job_line), as a table: the same in both modes,
// since both write failures through write_failure.
#include <doctest/doctest.h>

#include <string>

#include "execution/attempt.hpp"
#include "execution/job_events.hpp"
#include "support/captured_log.hpp"

using namespace std::chrono_literals;
using oncely::JobEvent;
using oncely::detail::ClaimedJob;
using oncely::detail::Failure;
using oncely::detail::FailureClass;
using oncely::detail::HandlerRun;
using oncely::detail::plan_failure;

namespace {

struct Row {
  const char* what;
  FailureClass cls;
  int attempt;
  bool counts;           // an attempt was made
  const char* decision;  // the schema's failure_outcome() (tests/pg/retry_decision_pgtest.cpp)
  JobEvent::Outcome outcome;
  const char* event_class;  // the dead letter's class, or the retry's
  const char* entry_class;  // the errors[] entry's class; "" for none
  const char* line;         // the start of the job line, up to its trace field
};

}  // namespace

TEST_CASE("attempt outcome: a failed attempt's decision, record, event and job line, as a table") {
  const Row rows[] = {
      {"a retryable failure with attempts left retries", FailureClass::retryable, 1, true, "retry",
       JobEvent::Outcome::retried, "retryable", "retryable",
       "[warning] job retry queue=payments kind=charge id=42 attempt=1"},
      {"the last attempt's plain failure: exhausted", FailureClass::retryable, 3, true, "exhausted",
       JobEvent::Outcome::dead_lettered, "exhausted", "retryable",
       "[error] job dead-lettered queue=payments kind=charge id=42 attempt=3"},
      {"a permanent failure: at once, under its own class", FailureClass::permanent, 1, true, "permanent",
       JobEvent::Outcome::dead_lettered, "permanent", "permanent",
       "[error] job dead-lettered queue=payments kind=charge id=42 attempt=1"},
      {"a timeout on the last attempt keeps its name", FailureClass::timeout, 3, true, "timeout",
       JobEvent::Outcome::dead_lettered, "timeout", "timeout",
       "[error] job dead-lettered queue=payments kind=charge id=42 attempt=3"},
      {"a lease that expired with no attempt left (lease mode's claim)", FailureClass::lease_expired, 3, true,
       "lease_expired", JobEvent::Outcome::dead_lettered, "lease_expired", "lease_expired",
       "[error] job dead-lettered queue=payments kind=charge id=42 attempt=3"},
      {"no attempt left to make: no errors[] entry", FailureClass::crashed, 3, false, "crashed",
       JobEvent::Outcome::dead_lettered, "crashed", "",
       "[error] job dead-lettered queue=payments kind=charge id=42 attempt=3"},
      {"no handler for the kind", FailureClass::unknown_kind, 1, true, "unknown_kind", JobEvent::Outcome::dead_lettered,
       "unknown_kind", "unknown_kind", "[error] job dead-lettered queue=payments kind=charge id=42 attempt=1"},
  };
  ClaimedJob job;
  job.id = 42;
  job.kind = "charge";
  job.waited_us = 1500;
  job.marker = "(0,7)";
  job.trace_context = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  for (const Row& row : rows) {
    CAPTURE(std::string(row.what));
    const HandlerRun run{Failure::of(row.cls, "upstream said no"), 1200us, nullptr};
    const auto decision = oncely::detail::decision_of(row.cls, row.decision, 250ms);
    const auto plan =
        plan_failure("payments", {.job = job, .attempt = row.attempt, .run = run, .counts = row.counts}, decision);
    CHECK(plan.event.outcome == row.outcome);
    CHECK(plan.event.error_class == row.event_class);
    CHECK(plan.record.dead_letter_class == row.event_class);
    CHECK(plan.record.attempt_class.value_or("") == std::string(row.entry_class));
    CHECK(plan.record.attempts == row.attempt);
    CHECK(plan.record.marker == job.marker);  // deleted with the failure (transaction mode)
    CHECK(plan.event.attempt == row.attempt);
    CHECK(plan.event.run_time == 1200us);
    CHECK(plan.event.wait == 1500us);
    CHECK(plan.event.retry_delay == (row.outcome == JobEvent::Outcome::retried ? 250ms : 0ms));
    oncely::test::CapturedLog log;
    oncely::detail::log_job_line(*log.logger, plan.event);
    const std::string line = log.text();
    CAPTURE(line);
    CHECK(line.find(row.line) != std::string::npos);
    CHECK(line.find(" trace_id=4bf92f3577b34da6a3ce929d0e0e4736") != std::string::npos);
    if (row.outcome == JobEvent::Outcome::retried) CHECK(line.find(" delay=250ms class=") != std::string::npos);
    CHECK(line.find(std::string(" class=") + row.event_class + " error=upstream said no") != std::string::npos);
  }
}

TEST_CASE("attempt outcome: completions are logged at debug only, a stale lease and a crash at warn") {
  ClaimedJob job;
  job.id = 9;
  job.kind = "sync";
  oncely::test::CapturedLog quiet(spdlog::level::info);
  oncely::detail::log_job_line(*quiet.logger, oncely::detail::event_of(job, "q", 1, JobEvent::Outcome::completed));
  CHECK(quiet.text().empty());
  oncely::detail::log_job_line(*quiet.logger, oncely::detail::event_of(job, "q", 1, JobEvent::Outcome::lease_stale));
  CHECK(quiet.count("[warning] lease stale:") == 1);
  JobEvent crash = oncely::detail::event_of(job, "q", 2, JobEvent::Outcome::crashed);
  crash.error_class = "lease_expired";
  crash.error = "its lease expired (worker 3 stopped renewing it): taken back";
  oncely::detail::log_job_line(*quiet.logger, crash);
  CHECK(
      quiet.count("[warning] job attempt never finished queue=q kind=sync id=9 attempt=2 class=lease_expired error=its "
                  "lease expired (worker 3 stopped renewing it): taken back") == 1);
}
