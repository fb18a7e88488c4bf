#pragma once
// One attempt, either mode: what both executors do the same way, written once.
//   run_attempt    calls a job's handler and says what it came to (a HandlerRun)
//   apply_effects  runs a lease job's on_complete effects in its completion's transaction
//   decide         asks the schema what becomes of a failed attempt (retry after what delay,
//                  or a dead letter of which class: failure_outcome(), backoff_delay())
//   write_failure  writes a failed attempt's outcome, as decide() says: a retry or the
//                  dead-letter move; returns the event its job line and metrics come from
// What differs between the modes is passed in: where the handler's database work goes (the
// batch's JobTransaction, or the LeaseAttempt that collects effects) and how a retry is
// written (through the row the batch locked, or fenced by the lease).

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <variant>

#include <pqxx/transaction>

#include "execution/failure_trace.hpp"
#include "execution/queue_context.hpp"
#include "execution/registered_handler.hpp"
#include "execution/retry_policy.hpp"
#include "oncely/values.hpp"
#include "store/records.hpp"

namespace oncely::detail {

class JobTransaction;
struct LeaseAttempt;

using AttemptClock = std::chrono::steady_clock;

/// What one run of a handler (or of a lease job's effects) came to.
struct HandlerRun {
  std::optional<Failure> failure;  // none: it returned in time, its transaction intact
  std::chrono::microseconds run_time{0};
  std::shared_ptr<const ThrowTrace> trace;  // where the failure's exception was thrown (none: no stack to keep)
  std::chrono::system_clock::time_point started_at{};  // when the handler started
  std::optional<std::string> traceparent{};            // what it ran under: its process span
  std::optional<std::string> output{};                 // what it returned (JobContext::set_output), JSON text
};

/// `event` with what `run` knows of its attempt: run time, start and span.
JobEvent& with_run(JobEvent& event, const HandlerRun& run);

/// What the completed attempt `attempt` of `job`, as `run` says, leaves in the job's record.
[[nodiscard]] CompletionRecord completion_record(const ClaimedJob& job, int attempt, const HandlerRun& run);

/// Where an attempt's database work goes: the batch's transaction (transaction mode), or the
/// lease attempt whose on_complete effects wait for its completion (lease mode).
using AttemptTarget = std::variant<JobTransaction*, LeaseAttempt*>;

/// The handler registered for `kind`, or null.
[[nodiscard]] const RegisteredHandler* find_handler(const HandlerRegistry& handlers, const std::string& kind);
/// The failure of an attempt whose kind no handler of this worker takes.
[[nodiscard]] Failure no_handler_for(std::string_view kind);

/// One attempt's identity and limits, as its JobContext shows them.
struct AttemptSpec {
  const ClaimedJob& job;
  std::string_view queue;
  int attempt = 0;  // 1 for the first
  AttemptClock::time_point deadline;
  std::chrono::milliseconds job_timeout{0};  // for the timeout's message
  std::stop_token stop;
};

/// Runs `handler` for one attempt: gives it a JobContext (with a span of its own when the
/// job carries a trace context) and says what came of it: an exception classified
/// (classify()) with its stack kept; a return after the deadline a `timeout`; in
/// transaction mode, a transaction the handler ended or left aborted a retryable failure.
HandlerRun run_attempt(const RegisteredHandler& handler, AttemptTarget target, const AttemptSpec& spec,
                       std::mt19937_64& span_ids);

/// Lease mode: runs `attempt`'s on_complete effects in `txn`, in a savepoint of their own
/// (begin_job), and says what came of them as run_attempt does.
HandlerRun apply_effects(JobTransaction& txn, LeaseAttempt& attempt);

/// A failed attempt, to be written.
struct FailedAttempt {
  const ClaimedJob& job;  // as claimed; its marker (transaction mode) is deleted with the failure
  int attempt = 0;        // the attempt's number: the job's attempts after it
  const HandlerRun& run;  // its failure, run time and stack
  bool counts = true;     // false: no attempt was made (none was left): no errors[] entry
};

/// What becomes of `failed`, under `config` (its max_attempts unless the job has its own, its
/// backoff): the schema's failure_outcome() and backoff_delay() (migration 19), the one
/// owner of the rule and the formula, shared with the SQL worker protocol's fail_job(). One
/// statement in `tx`, which reads and writes nothing.
[[nodiscard]] Decision decide(pqxx::transaction_base& tx, const Store& store, const QueueConfig& config,
                              const Failure& failure, const ClaimedJob& job, int attempt);

/// What a failed attempt comes to, before anything is written: the decision, the record to
/// write (a retry's errors[] entry, or the dead letter) and the event.
struct FailurePlan {
  Decision decision;
  FailureRecord record;
  JobEvent event;
};
/// Pure but for the process's stack_traces setting (add_stack): `failed`'s plan in `queue`,
/// as `decision` says.
[[nodiscard]] FailurePlan plan_failure(std::string_view queue, const FailedAttempt& failed, const Decision& decision);

/// How a mode writes a retry: transaction mode through the row its batch locked
/// (JobsTable::retry), lease mode fenced by the lease (JobLeasesTable::retry).
using RetryWriter = std::function<void(const FailureRecord&, std::chrono::milliseconds delay)>;

/// Writes `failed`'s outcome in `tx`, as decide() says: a retry through `retry`, or the
/// dead-letter move (DeadLettersTable::move_job). Returns the event, from which its job
/// line is logged once the transaction commits (emit()).
JobEvent write_failure(pqxx::transaction_base& tx, const QueueContext& queue, const FailedAttempt& failed,
                       const RetryWriter& retry);

}  // namespace oncely::detail
