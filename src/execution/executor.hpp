#pragma once
// Executor: runs one batch on one worker thread's connections, in one direction:
//   claim   one statement locks a batch, inserts its dedup markers, sets its limits
//   record  the attempts, durably, in the thread's AttemptRecord (own connection)
//   count   attempts that never finished (other records naming these jobs)
//   run     each handler (a savepoint only if it touches the transaction), giving an
//           AttemptResult; a failure's fate is the schema's (decide() in attempt.hpp)
//   settle  one statement completes the batch, then COMMIT.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <stop_token>
#include <vector>

#include <pqxx/except>
#include <pqxx/transaction>

#include "execution/attempt.hpp"
#include "execution/job_transaction.hpp"
#include "execution/queue_context.hpp"
#include "execution/retry_policy.hpp"
#include "execution/suspects.hpp"
#include "oncely/values.hpp"
#include "store/records.hpp"

namespace oncely::detail {

class Executor {
 public:
  Executor(const QueueContext& queue, std::uint64_t seed);

  struct BatchResult {
    int claimed = 0;   // jobs locked by the claim
    int limit = 0;     // what the claim asked for
    int released = 0;  // claimed but not started (the batch ran out of time): ready again
    // A limited queue's claim that ended for want of a slot, after waiting for one: claim
    // again at once (to wait on a slot again), rather than sleep until a poll.
    bool held_back = false;
  };

  /// Runs one batch of at most `max_jobs` jobs (the rate limit's allowance).
  /// Throws on database errors; the caller then calls recover().
  BatchResult run_batch(WorkerConnections& c, const std::stop_token& stop, int max_jobs);

  /// How many jobs the next claim would ask for.
  [[nodiscard]] int claim_limit() const;
  /// Suspects wait to run isolated: the next batch is theirs, to be run at once.
  [[nodiscard]] bool has_suspects() const noexcept { return !suspects_.empty(); }

  /// After run_batch threw: records what can be recorded of the lost batch (the failing
  /// job's attempt, which jobs had started) and gives the thread a fresh attempt record.
  /// Throws if the database is still unreachable (the caller reconnects and retries).
  void recover(WorkerConnections& c);

 private:
  /// What running one job's handler came to. A failed one's writes are undone (rolled
  /// back to its savepoint, or it wrote nothing); a lost one's could not be undone alone.
  struct AttemptResult {
    enum class Kind { completed, failed, lost } kind = Kind::completed;
    int attempt = 0;                 // its number (the attempts used, when none was left)
    HandlerRun run;                  // its failure when failed or lost
    bool counts = true;              // false: no attempt was left to make, none is recorded
    bool without_savepoint = false;  // lost: a transaction-only job, run without a savepoint
  };
  /// Claims up to `limit` ready jobs of the queue, where the queue's ClaimStart says;
  /// `started_after` tells where the claim started, also when it throws.
  std::vector<ClaimedJob> claim_ready(pqxx::work& tx, int limit, std::optional<ClaimKey>& started_after);
  /// Claims jobs by id (`ids`: an isolated group of suspects), those still there and free,
  /// with their slots if the queue has limits.
  std::vector<ClaimedJob> claim_suspects(pqxx::work& tx, const std::vector<std::int64_t>& ids);
  /// A queue with limits (queue_limits): whether a batch may take a job only with its slots.
  [[nodiscard]] bool limited() const noexcept { return queue_.config.limits.has_value(); }
  /// After a claim statement that started after `failed_after` failed on `cause`: locks
  /// the ready jobs it tried and claims them one by one; a job whose claim fails because of
  /// its row is dead-lettered as unreadable.
  std::vector<ClaimedJob> claim_one_at_a_time(pqxx::work& tx, int limit, const std::optional<ClaimKey>& failed_after,
                                              const pqxx::sql_error& cause, std::vector<JobEvent>& events);
  /// Records the batch's attempts; returns the unfinished attempts to charge (none in a
  /// batch that is not isolated: a first crash is kept as evidence, suspects.hpp), or
  /// nothing when the batch must be given back untouched (suspects of it run isolated first).
  std::optional<std::vector<UnfinishedAttempts>> record_attempts(WorkerConnections& c, JobTransaction& txn,
                                                                 const std::vector<ClaimedJob>& jobs, bool exclusive);
  /// Charges unfinished attempts to the jobs (jobs.attempts/errors) in the batch transaction.
  long charge_unfinished(WorkerConnections& c, JobTransaction& txn, std::vector<ClaimedJob>& jobs,
                         const std::vector<UnfinishedAttempts>& unfinished, std::vector<JobEvent>& events);
  /// After the batch's COMMIT failed with `error` (the connection still open): a batch's
  /// jobs run alone next; a job alone whose handler ran has the error as its attempt's
  /// failure, in lost_ (true: recorded by recover(), once the failed transaction is gone).
  bool settle_failed_commit(WorkerConnections& c, const std::vector<ClaimedJob>& jobs,
                            const std::vector<std::int64_t>& finished, const pqxx::sql_error& error);
  AttemptResult run_one(class JobTransaction& txn, const ClaimedJob& job);
  /// Writes a failed attempt's outcome (retry or dead letter, as decide() says) in `tx`.
  JobEvent record_failure(pqxx::transaction_base& tx, const ClaimedJob& job, const AttemptResult& result);
  void emit(const std::vector<JobEvent>& events) const;

  const QueueContext& queue_;
  TransactionLimits limits_;
  std::mt19937_64 rng_;
  double mean_run_us_ = 0;           // moving average of handler time, sizes the next claim
  bool held_back_ = false;           // the last claim of a limited queue was held back (BatchResult)
  bool claimed_before_ = false;      // a claim of this thread found jobs: the next may be a full batch
  bool used_savepoints_ = false;     // the last batch's handlers wrote through the transaction
  bool batch_ran_external_ = false;  // this batch ran a handler that is not transaction-only
  // After a transaction-only job cost a batch, the next batches isolate every job.
  static constexpr int kIsolatedBatchesAfterLoss = 16;
  int isolated_batches_left_ = 0;
  // The batch in progress, for recover(): which jobs started, and a failure that could not
  // be written because the transaction was already gone.
  std::vector<std::int64_t> started_;
  struct LostFailure {
    ClaimedJob job;
    AttemptResult result;
  };
  // Set where a failure cannot be written in its batch (run_batch: a lost attempt;
  // settle_failed_commit: a COMMIT refused one job's writes), written by recover() in a
  // transaction of its own once the batch's is gone.
  std::optional<LostFailure> lost_;
  // Jobs found in the attempt records of batches that never finished, seen in more than one
  // crash: they run isolated next, in groups (suspects.hpp).
  std::deque<Suspect> suspects_;
};

}  // namespace oncely::detail
