#pragma once
// The jobs table: every statement that reads or writes jobs rows at run time — enqueue,
// the claim (with its dedup markers), the batch's completion, retries, the fold of
// attempts that never finished. The rules a new row must satisfy: support/job_rules.hpp.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <pqxx/transaction_base>

#include "oncely/records.hpp"
#include "oncely/values.hpp"
#include "store/records.hpp"
#include "store/sql.hpp"
#include "support/job_rules.hpp"

namespace oncely::detail {

/// A job's depends_on as a bigint[] literal; none when it names no parent.
[[nodiscard]] std::optional<std::string> parents_literal(const NewJob& job);

class JobsTable {
 public:
  explicit JobsTable(StatementSet& statements);

  // ---- enqueue ----
  /// INSERT one job; returns its id. Validates what the database would reject less clearly.
  /// Runs on any connection (unnamed statement).
  std::int64_t enqueue(pqxx::transaction_base& tx, const NewJob& job) const;
  /// The same on a connection given to prepare(): a prepared statement when they are on.
  std::int64_t enqueue_prepared(pqxx::transaction_base& tx, const NewJob& job) const;
  /// The enqueue INSERT, for a caller that prepares it on a connection of its own
  /// (parameters: kind, payload, queue, idempotency_key, run_at, delay_ms, priority,
  /// max_attempts; returns the id).
  [[nodiscard]] const std::string& enqueue_sql() const noexcept { return enqueue_->sql; }
  /// `n` new job ids from the jobs identity sequence, ascending (COPY cannot RETURN them).
  std::vector<std::int64_t> reserve_ids(pqxx::transaction_base& tx, int n) const;
  /// What a COPY into jobs names: the table, schema-qualified, and the columns it sends
  /// (without and with the id).
  [[nodiscard]] const std::string& copy_table() const noexcept { return copy_table_; }
  static const std::vector<std::string>& copy_columns(bool with_id);

  // ---- the job transaction ----
  /// Locks up to `limit` ready jobs of `queue` (SKIP LOCKED), inserts their dedup markers,
  /// and sets the transaction's limits. Duplicates come back with duplicate() true. Jobs come
  /// in claim order; with `after`, only jobs after that key are considered.
  std::vector<ClaimedJob> claim(pqxx::transaction_base& tx, std::string_view queue, int limit,
                                const TransactionLimits& limits, const std::optional<ClaimKey>& after) const;
  /// The ids of up to `limit` ready jobs of `queue`, locked (SKIP LOCKED), in claim order
  /// (after `after`, as claim()), without markers or limits: for claiming them one at a
  /// time after claim() failed.
  std::vector<std::int64_t> lock_ready(pqxx::transaction_base& tx, std::string_view queue, int limit,
                                       const std::optional<ClaimKey>& after) const;
  /// What lock_limited() took.
  struct LimitedJobs {
    std::vector<std::int64_t> ids;  // locked, each with its slots, in claim order
    bool held_back = false;         // the claim ended for want of a slot of the queue
  };
  /// Up to `limit` ready jobs of a queue with limits (or of `only_ids` of them), locked, each
  /// with its slots: the schema's lock_ready_limited() (migration 23). With `wait`, a claim
  /// that finds every slot of the queue held waits up to that long for one to come back.
  /// Once per transaction; claim_by_ids() claims them.
  LimitedJobs lock_limited(pqxx::transaction_base& tx, std::string_view queue, int limit,
                           const std::vector<std::int64_t>& only_ids,
                           std::optional<std::chrono::milliseconds> wait = std::nullopt) const;
  /// The same as claim() for jobs by id (an isolated group of suspects, or one job), those
  /// still there and free.
  std::vector<ClaimedJob> claim_by_ids(pqxx::transaction_base& tx, const std::vector<std::int64_t>& ids,
                                       const TransactionLimits& limits) const;
  /// Charges unfinished attempts to jobs.attempts/errors (`jobs` holds (id, count); a count
  /// may be 0) and removes those jobs from every other attempt record. Returns the new
  /// attempts of the jobs charged.
  std::vector<std::pair<std::int64_t, int>> fold_interrupted(pqxx::transaction_base& tx,
                                                             const std::vector<std::pair<std::int64_t, int>>& jobs,
                                                             std::int64_t own_record) const;
  /// What a batch's completion writes.
  struct BatchCompletion {
    const std::vector<std::int64_t>& finished_ids;     // completed and duplicate jobs
    const std::vector<CompletedAttempt>& completed;    // the completed ones and their records
    const std::vector<std::string>& released_markers;  // of jobs released unstarted
    std::int64_t record = 0;                           // the batch's attempt record
    std::int64_t slot = 0;                             // the thread's job_stats slot
    std::string_view queue;
    std::string_view worker;  // "host:pid"
    OutcomeCounts counts;
  };
  /// Deletes completed and duplicate jobs, writes the batch's completion row (the completed
  /// ones' records), deletes the markers of jobs released unstarted, adds the batch's outcomes
  /// to job_stats and deletes the batch's attempt record, in one statement.
  void complete_batch(pqxx::transaction_base& tx, const BatchCompletion& batch) const;
  /// Records a retryable failure: attempts, errors, last_error, run_at = now() + delay.
  void retry(pqxx::transaction_base& tx, const FailureRecord& failure, std::chrono::milliseconds delay) const;
  /// Re-locks one job by id after its batch transaction was lost, if its attempts are still
  /// `seen_attempts` (nobody else moved it meanwhile). Returns whether it was locked.
  bool relock(pqxx::transaction_base& tx, std::int64_t id, int seen_attempts) const;

  // ---- the operator's view ----
  /// Depth, ready, scheduled, retrying and held jobs and the oldest ready job's age, per
  /// queue, into `by_queue` (`queue`: only that one).
  void read_depths(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                   std::map<std::string, QueueStats>& by_queue) const;

 private:
  const StatementSet& statements_;
  std::string copy_table_;
  const Statement *enqueue_, *reserve_ids_, *claim_, *lock_ready_, *lock_limited_, *claim_by_ids_, *fold_interrupted_,
      *complete_batch_, *retry_, *relock_, *depths_;
};

}  // namespace oncely::detail
