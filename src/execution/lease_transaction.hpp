#pragma once
// What a lease queue's cycle transaction does (LeaseQueue::cycle runs them, in this order,
// and commits once):
//   settle  the attempts that finished, fenced: completions with their markers and database
//           effects, retries and dead letters (write_failure); an attempt whose lease was
//           lost changes nothing and is reported stale
//   claim   lock ready jobs where the queue's ClaimStart says, lease them, and dead-letter
//           those whose last attempt's lease expired
// Each gives the events its statements wrote, to be emitted once the transaction commits.

#include <memory>
#include <optional>
#include <vector>

#include <pqxx/transaction>

#include "execution/attempt.hpp"
#include "execution/job_transaction.hpp"
#include "execution/lease_attempt.hpp"
#include "execution/queue_context.hpp"
#include "oncely/values.hpp"
#include "store/records.hpp"

namespace oncely::detail {

/// One attempt whose handler has returned, waiting to be settled.
struct FinishedAttempt {
  std::shared_ptr<LeaseAttempt> attempt;
  HandlerRun run;  // no failure: completed
};

/// Settles `batch` in `txn`, fenced by each attempt's lease; gives the events. None when an
/// effect's error ended the transaction: that attempt now has a failure and no effects, and
/// the caller starts over with a new transaction.
std::optional<std::vector<JobEvent>> settle_leases(JobTransaction& txn, const QueueContext& queue,
                                                   std::vector<FinishedAttempt>& batch);

/// What a claim leased, handed to handler threads once its transaction has committed.
struct LeaseClaim {
  std::vector<std::shared_ptr<LeaseAttempt>> attempts;
  std::vector<JobEvent> events;  // duplicates, leases taken back, dead letters
  OutcomeCounts counts;
  int taken = 0;  // rows the claim locked: leased, deleted as duplicates, or passed over
  // A short claim of a queue with limits: when they may let the next claim find room
  // without a commit that wakes the queue (a rate window, an expiring lease).
  std::optional<std::chrono::milliseconds> retry_in;
};

/// Leases up to `limit` ready jobs of `queue` in `tx`.
LeaseClaim claim_leases(pqxx::work& tx, const QueueContext& queue, int limit);

}  // namespace oncely::detail
