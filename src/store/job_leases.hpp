#pragma once
// The jobs table in lease mode: the statements of a lease queue's claim, its renewal, and
// its fenced completion, retry and release. Every statement after the claim touches a row
// only where lease_token is still the one the claim handed out (migration 0007): a worker
// whose lease expired, and whose job someone else took, changes nothing.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pqxx/transaction_base>

#include "store/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

/// One lease as its holder knows it: the job and the token it was given.
struct HeldLease {
  std::int64_t job_id = 0;
  std::int64_t token = 0;
};

/// A renewal's answer: the tokens it renewed, and those still the holder's that it skipped
/// because another transaction had their row locked (renewed at a later tick).
struct RenewedLeases {
  std::vector<std::int64_t> renewed;
  std::vector<std::int64_t> skipped;
};

/// A job a lease claim took, with the lease it now holds, or took to dead-letter.
struct LeasedJob {
  enum class Kind { leased, exhausted, duplicate } kind = Kind::leased;
  ClaimedJob job;                               // attempts: the attempts counted, this one included (leased)
  std::int64_t token = 0;                       // leased only
  bool took_expired = false;                    // its previous lease had expired: that attempt never finished
  std::optional<std::int64_t> previous_holder;  // workers.id of that lease's holder
};

/// What a lease claim's first statement locked: the ids, and where the last of them stood in
/// the claim order (none: an infinite run_at).
struct LockedJobs {
  std::vector<std::int64_t> ids;
  std::optional<ClaimKey> last;
  [[nodiscard]] bool empty() const { return ids.empty(); }
};

class JobLeasesTable {
 public:
  explicit JobLeasesTable(StatementSet& statements);

  /// Locks up to `limit` ready jobs of `queue` (SKIP LOCKED), and, for each with a key, a
  /// transaction lock on that key, skipping the jobs whose key another claim holds right
  /// now. With `after`, only jobs after that key in the claim order, as JobsTable::claim().
  /// The first statement of a lease claim; lease() must follow in the same transaction.
  LockedJobs lock_ready(pqxx::transaction_base& tx, std::string_view queue, int limit,
                        const std::optional<ClaimKey>& after) const;
  /// The second: of the jobs lock_ready() locked, deletes those whose key was processed
  /// (duplicate), leaves those whose key another job's live lease holds, and leases the
  /// rest, one per key: a new token, leased_by, attempts + 1, run_at = now() + lease. A job
  /// whose expired lease used up its attempts is returned as exhausted, not leased.
  std::vector<LeasedJob> lease(pqxx::transaction_base& tx, const std::vector<std::int64_t>& locked,
                               std::int64_t worker_id, std::chrono::milliseconds lease, int default_max_attempts) const;
  /// Renews every lease in `held` (each for its own duration) in one statement, skipping the
  /// rows another transaction has locked; returns the tokens still the holder's, renewed or
  /// skipped. The others are lost. (Tokens, not job ids, name leases throughout: one process
  /// may hold a job's new lease while an attempt of its expired one still runs.)
  RenewedLeases renew(pqxx::transaction_base& tx, const std::vector<HeldLease>& held,
                      const std::vector<std::chrono::milliseconds>& durations) const;
  /// Locks the rows of `held` whose lease is still the holder's, in id order; returns their
  /// tokens. Guards the transaction if it locked any: nothing but a COMMIT after unguard() commits it.
  std::vector<std::int64_t> lock_held(pqxx::transaction_base& tx, const std::vector<HeldLease>& held) const;
  /// Ends lock_held()'s guard: the settlement is written, its COMMIT may follow.
  void unguard(pqxx::transaction_base& tx) const;
  /// Completes the jobs of `held` still leased by the holder: inserts their dedup markers
  /// and deletes them, in one statement, the schema's complete_leases() (complete_job()'s
  /// too). Returns the tokens completed; the others were stale.
  /// `records`: the completed attempts' records, by position (fewer: the rest have none);
  /// `worker` names this process (empty: the leases' holders).
  std::vector<std::int64_t> complete(pqxx::transaction_base& tx, const std::vector<HeldLease>& held,
                                     const std::vector<CompletionRecord>& records = {},
                                     std::string_view worker = {}) const;
  /// Records a failed attempt of a locked, held job (its attempt was counted at the claim)
  /// and frees it for the next one after `delay`.
  /// (failure: its error, attempt_class and detail's stack; attempts and marker are unused.)
  void retry(pqxx::transaction_base& tx, const HeldLease& held, const FailureRecord& failure,
             std::chrono::milliseconds delay) const;
  /// Gives jobs back unfinished (shutdown): no lease, ready now, the attempt not charged.
  /// Returns how many were still the holder's.
  long release(pqxx::transaction_base& tx, const std::vector<HeldLease>& held) const;
  /// After a short claim of a queue with limits: how long until its limits may let a claim
  /// find room without a commit that says so (a rate window moving on, a lease expiring);
  /// none when nothing but the lack of ready jobs holds it back.
  std::optional<std::chrono::milliseconds> limits_retry_in(pqxx::transaction_base& tx, std::string_view queue) const;
  /// Before a settlement that the same transaction follows with a claim of `queue` at least
  /// as large: the slots it frees are its own to take back, so its commit wakes no other
  /// worker for them (the slot-freed triggers of migration 25).
  void take_back_freed_slots(pqxx::transaction_base& tx, std::string_view queue) const;

 private:
  const StatementSet& statements_;
  const Statement *lock_ready_, *lease_, *renew_, *lock_held_, *unguard_, *complete_, *retry_, *release_,
      *limits_retry_in_, *take_back_freed_slots_;
};

}  // namespace oncely::detail
