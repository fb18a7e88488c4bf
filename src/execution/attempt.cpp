#include "execution/attempt.hpp"

#include "execution/job_events.hpp"
#include "execution/job_transaction.hpp"
#include "execution/lease_attempt.hpp"
#include "oncely/job_context.hpp"
#include "support/duration.hpp"
#include "support/stack_trace.hpp"
#include "support/telemetry.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {

/// The one maker of JobContexts (their constructors are private): a handler is handed a
/// context by the runtime and cannot forge one.
struct JobContextFactory {
  static JobContext make(AttemptTarget target, const AttemptSpec& spec) {
    const ClaimedJob& job = spec.job;
    JobTransaction* const* transaction = std::get_if<JobTransaction*>(&target);
    LeaseAttempt* const* lease = std::get_if<LeaseAttempt*>(&target);
    return JobContext(transaction ? *transaction : nullptr, lease ? *lease : nullptr, job.id, spec.queue, job.kind,
                      job.payload_text, spec.attempt, job.effective_key(), spec.deadline, spec.stop);
  }
  static std::optional<std::string> take_output(JobContext& context) { return std::move(context.output_); }
  /// This attempt's span: a child of the producer's, when the job carries a trace context;
  /// with span export on (docs/opentelemetry.md), the process span, a new trace's root when
  /// the job has none.
  static const std::optional<std::string>& set_span(JobContext& context, const ClaimedJob& job,
                                                    std::mt19937_64& span_ids) {
    if (Tracer* tracer = process_tracer()) {
      context.traceparent_ = tracer->start(job.trace_context).traceparent();
    } else if (job.trace_context) {
      context.traceparent_ = child_traceparent(*job.trace_context, span_ids);
    }
    return context.traceparent_;
  }
};

namespace {

std::chrono::microseconds since(AttemptClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(AttemptClock::now() - start);
}

/// What the handler left of its job's transaction, when it returned normally: a failure if
/// the transaction is no longer usable.
std::optional<Failure> transaction_left_unusable(JobTransaction& txn) {
  switch (transaction_state(txn.work())) {
    case TransactionState::open: return std::nullopt;
    case TransactionState::gone:
      // An error raised through a plain exec() makes libpqxx roll the whole transaction
      // back, and the handler caught it and returned; or the handler ran ROLLBACK (a
      // COMMIT fails: the commit guard). Every write of the batch so far is gone.
      return Failure::of(FailureClass::retryable,
                         "the job's transaction ended inside the handler (an SQL error raised through a plain exec() "
                         "and caught, or a ROLLBACK)");
    case TransactionState::failed:
      return Failure::of(FailureClass::retryable,
                         "the handler caught an SQL error and returned normally, but its transaction was aborted");
  }
  return std::nullopt;
}

}  // namespace

JobEvent& with_run(JobEvent& event, const HandlerRun& run) {
  event.run_time = run.run_time;
  event.started_at = run.started_at;
  event.attempt_traceparent = run.traceparent;
  return event;
}

CompletionRecord completion_record(const ClaimedJob& job, int attempt, const HandlerRun& run) {
  CompletionRecord record{
      .attempt = attempt, .run_time_us = run.run_time.count(), .trace_id = {}, .output = run.output};
  for (const auto& traceparent : {run.traceparent, job.trace_context}) {
    if (traceparent && !trace_id_of(*traceparent).empty()) {
      record.trace_id = std::string(trace_id_of(*traceparent));
      break;
    }
  }
  return record;
}

const RegisteredHandler* find_handler(const HandlerRegistry& handlers, const std::string& kind) {
  const auto it = handlers.find(kind);
  return it == handlers.end() ? nullptr : &it->second;
}

Failure no_handler_for(std::string_view kind) {
  return Failure::of(FailureClass::unknown_kind, "no handler for kind '" + std::string(kind) + "' in this worker");
}

HandlerRun run_attempt(const RegisteredHandler& handler, AttemptTarget target, const AttemptSpec& spec,
                       std::mt19937_64& span_ids) {
  HandlerRun run;
  run.started_at = std::chrono::system_clock::now();
  const auto start = AttemptClock::now();
  try {
    JobContext context = JobContextFactory::make(target, spec);
    run.traceparent = JobContextFactory::set_span(context, spec.job, span_ids);
    invoke_handler(handler.run, context);  // a frame of its own: where a stack trace stops
    run.output = JobContextFactory::take_output(context);
    if (auto* txn = std::get_if<JobTransaction*>(&target)) run.failure = transaction_left_unusable(**txn);
    if (!run.failure && AttemptClock::now() > spec.deadline) {
      run.failure = Failure::of(
          FailureClass::timeout,
          "ran for " +
              format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(AttemptClock::now() - start)) +
              ", over the job_timeout of " + format_duration(spec.job_timeout));
    }
  } catch (...) {
    run.failure = classify(std::current_exception());
    run.trace = trace_to_keep(std::current_exception());
  }
  run.run_time = since(start);
  return run;
}

HandlerRun apply_effects(JobTransaction& txn, LeaseAttempt& attempt) {
  HandlerRun run;
  txn.begin_job(true);
  try {
    pqxx::work& work = txn.for_handler();
    for (const auto& effect : attempt.effects) effect(work);
    if (transaction_state(work) != TransactionState::open) {
      run.failure = Failure::of(FailureClass::retryable,
                                "an on_complete effect caught an SQL error and returned normally, but its transaction "
                                "was aborted");
    }
  } catch (...) {
    run.failure = classify(std::current_exception());
    run.trace = trace_to_keep(std::current_exception());
  }
  return run;
}

Decision decide(pqxx::transaction_base& tx, const Store& store, const QueueConfig& config, const Failure& failure,
                const ClaimedJob& job, int attempt) {
  const RetryAnswer answer =
      store.retry_decisions.decide(tx, {.failure_class = to_string(failure.cls),
                                        .attempt = attempt,
                                        .max_attempts = job.max_attempts.value_or(config.max_attempts),
                                        .retry_after = failure.retry_after,
                                        .backoff = config.backoff});
  return decision_of(failure.cls, answer.outcome, answer.delay);
}

FailurePlan plan_failure(std::string_view queue, const FailedAttempt& failed, const Decision& decision) {
  const ClaimedJob& job = failed.job;
  const Failure& failure = *failed.run.failure;
  const std::string cls(to_string(decision.cls));
  FailurePlan plan{
      decision,
      {job.id, job.marker, failed.attempt, failure.message,
       failed.counts ? std::optional<std::string>(to_string(failure.cls)) : std::nullopt, cls, failure.detail},
      event_of(job, queue, failed.attempt,
               decision.dead_letter() ? JobEvent::Outcome::dead_lettered : JobEvent::Outcome::retried)};
  add_stack(plan.record, decision.dead_letter(),
            failed.run.trace.get());  // symbolised only here, and only if asked for
  plan.event.error_class = cls;
  plan.event.error = failure.message;
  with_run(plan.event, failed.run);
  if (!decision.dead_letter()) plan.event.retry_delay = decision.delay;
  return plan;
}

JobEvent write_failure(pqxx::transaction_base& tx, const QueueContext& queue, const FailedAttempt& failed,
                       const RetryWriter& retry) {
  const Decision decision = decide(tx, *queue.store, queue.config, *failed.run.failure, failed.job, failed.attempt);
  FailurePlan plan = plan_failure(queue.name, failed, decision);
  if (plan.decision.dead_letter()) {
    queue.store->dead_letters.move_job(tx, plan.record);
  } else {
    retry(plan.record, plan.decision.delay);
  }
  return std::move(plan.event);
}

}  // namespace oncely::detail
