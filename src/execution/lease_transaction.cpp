#include "execution/lease_transaction.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <unordered_set>

#include "execution/job_events.hpp"
#include "store/store.hpp"
#include "support/steady_clock.hpp"

namespace oncely::detail {
namespace {

using Clock = std::chrono::steady_clock;

/// The event of a leased attempt's outcome (its attempt number was counted at the claim).
JobEvent event_of(const LeaseAttempt& a, JobEvent::Outcome outcome) {
  return event_of(a.job, a.queue, a.job.attempts, outcome);
}

/// The claim's first statement, where the queue's ClaimStart says (as Executor::claim_ready).
std::vector<std::int64_t> lock_ready(pqxx::work& tx, const QueueContext& queue, int limit) {
  return claim_at(
             *queue.claim_start,
             [&](const std::optional<ClaimKey>& after) {
               return queue.store->leases.lock_ready(tx, queue.name, limit, after);
             },
             [](const LockedJobs& locked) { return locked.last; }, queue.observe_claim)
      .ids;
}

}  // namespace

std::optional<std::vector<JobEvent>> settle_leases(JobTransaction& txn, const QueueContext& queue,
                                                   std::vector<FinishedAttempt>& batch) {
  const Store& store = *queue.store;
  pqxx::work& tx = txn.work();
  std::vector<HeldLease> held;
  held.reserve(batch.size());
  for (const FinishedAttempt& f : batch) held.push_back(f.attempt->held);
  const bool only_plain_completions =
      std::ranges::all_of(batch, [](const FinishedAttempt& f) { return !f.run.failure && f.attempt->effects.empty(); });
  // Their records, by position: made only when the batch is completed in one statement.
  std::vector<CompletionRecord> records;
  if (only_plain_completions) {
    records.reserve(batch.size());
    for (const FinishedAttempt& f : batch) {
      records.push_back(completion_record(f.attempt->job, f.attempt->job.attempts, f.run));
    }
  }
  std::vector<JobEvent> events;
  // The common case, nothing but completions without effects: one statement completes
  // what is still ours and says which those were. Otherwise the held rows are locked
  // first, so that effects and failures are applied only to jobs still ours. Ours by token:
  // the batch may hold two attempts of one job, one whose lease expired while it ran and the
  // one that took the job again; only the second's token is the job's.
  std::vector<std::int64_t> locked = only_plain_completions
                                         ? store.leases.complete(tx, held, records, queue.worker_name)
                                         : store.leases.lock_held(tx, held);
  const std::unordered_set<std::int64_t> ours(locked.begin(), locked.end());
  // A job no longer ours may have been completed by its own handler (an exec or http
  // handler that called complete_job() with our token): a completion, whatever the handler
  // did after it, and not a lost lease.
  std::vector<std::int64_t> gone;
  for (const FinishedAttempt& f : batch) {
    if (!ours.contains(f.attempt->held.token)) gone.push_back(f.attempt->held.token);
  }
  const std::unordered_set<std::int64_t> completed_by_handler = store.lease_completions.take(tx, gone);
  std::vector<HeldLease> completed;
  std::vector<CompletionRecord> completed_records;
  for (FinishedAttempt& f : batch) {
    LeaseAttempt& a = *f.attempt;
    if (!ours.contains(a.held.token)) {
      const bool by_handler = completed_by_handler.contains(a.held.token);
      events.push_back(event_of(a, by_handler ? JobEvent::Outcome::completed : JobEvent::Outcome::lease_stale));
      with_run(events.back(), f.run);
      if (const std::int64_t lost_at = a.lost_at_unix_ns.load(); lost_at != 0) {
        events.back().lease_lost_at = std::chrono::system_clock::time_point(
            std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(lost_at)));
      }
      continue;
    }
    if (!f.run.failure && !a.effects.empty()) {
      HandlerRun effects = apply_effects(txn, a);
      if (effects.failure) {
        f.run.failure = std::move(effects.failure);
        f.run.trace = std::move(effects.trace);
        if (!txn.rollback_job()) {
          a.effects.clear();  // the failure stands; the next try records it without them
          return std::nullopt;
        }
      }
    }
    if (!f.run.failure) {
      if (a.effects_output) f.run.output = a.effects_output;
      completed.push_back(a.held);
      completed_records.push_back(completion_record(a.job, a.job.attempts, f.run));
      events.push_back(event_of(a, JobEvent::Outcome::completed));
      with_run(events.back(), f.run);
      continue;
    }
    events.push_back(write_failure(tx, queue, {.job = a.job, .attempt = a.job.attempts, .run = f.run},
                                   [&](const FailureRecord& record, std::chrono::milliseconds delay) {
                                     store.leases.retry(tx, a.held, record, delay);
                                   }));
  }
  if (!only_plain_completions) {
    if (!completed.empty()) store.leases.complete(tx, completed, completed_records, queue.worker_name);
    if (!locked.empty()) store.leases.unguard(tx);
  }
  return events;
}

LeaseClaim claim_leases(pqxx::work& tx, const QueueContext& queue, int limit) {
  const Store& store = *queue.store;
  const QueueConfig& config = queue.config;
  LeaseClaim claim;
  // The lease is ours from before the claim's statement on the server's clock: counting it
  // from here errs on the safe side.
  const std::int64_t sent = steady_ms();
  const auto deadline = Clock::now() + config.job_timeout;
  const std::vector<std::int64_t> locked = lock_ready(tx, queue, limit);
  claim.taken = static_cast<int>(locked.size());
  if (config.limits && claim.taken < limit) claim.retry_in = store.leases.limits_retry_in(tx, queue.name);
  if (locked.empty()) return claim;
  std::vector<LeasedJob> rows = store.leases.lease(tx, locked, queue.worker_id, config.lease, config.max_attempts);
  long crashed = 0;
  for (const LeasedJob& r : rows) {
    if (r.took_expired) ++crashed;
    if (r.kind == LeasedJob::Kind::duplicate) {
      claim.events.push_back(event_of(r.job, queue.name, 0, JobEvent::Outcome::deduplicated));
    } else if (r.kind == LeasedJob::Kind::exhausted) {
      // Its last attempt's lease expired (the attempt was counted at its claim): the
      // schema's failure_outcome() makes it a dead letter of class lease_expired.
      HandlerRun expired{Failure::of(FailureClass::lease_expired,
                                     "lease expired: its worker stopped renewing it (died, froze or lost the "
                                     "database), and no attempt is left"),
                         {},
                         nullptr};
      if (r.previous_holder) expired.failure->detail["worker_id"] = *r.previous_holder;
      claim.events.push_back(write_failure(tx, queue, {.job = r.job, .attempt = r.job.attempts, .run = expired},
                                           [](const FailureRecord&, std::chrono::milliseconds) {
                                             throw std::logic_error("a lease with no attempt left was given a retry");
                                           }));
    }
  }
  claim.counts = count(claim.events, crashed);
  for (LeasedJob& r : rows) {
    if (r.kind != LeasedJob::Kind::leased) continue;
    auto a = std::make_shared<LeaseAttempt>();
    a->held = {r.job.id, r.token};
    a->queue = queue.name;
    a->lease = config.lease;
    a->deadline = deadline;
    a->valid_until_ms = sent + config.lease.count();
    a->job = std::move(r.job);
    if (r.took_expired) {
      // Reported before this attempt's outcome, as a transaction queue reports a crash.
      JobEvent lost = event_of(a->job, a->queue, a->job.attempts - 1, JobEvent::Outcome::crashed);
      lost.error_class = to_string(FailureClass::lease_expired);
      lost.error = "its lease expired (worker " + std::to_string(r.previous_holder.value_or(0)) +
                   " stopped renewing it): taken back";
      claim.events.insert(claim.events.begin(), std::move(lost));
    }
    claim.attempts.push_back(std::move(a));
  }
  return claim;
}

}  // namespace oncely::detail
