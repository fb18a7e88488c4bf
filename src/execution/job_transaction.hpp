#pragma once
// JobTransaction: one batch's transaction and the savepoints that isolate its handlers.
//
// A handler that never touches the transaction (exec and http handlers, most no-op or
// external-effect C++ handlers) costs no savepoint. The first JobContext::tx() call of a
// job opens one, merging the previous job's RELEASE into the same round trip, so that a
// failing handler's writes can be undone with ROLLBACK TO SAVEPOINT.
//
// A job whose handler is declared transaction-only runs without a savepoint (one round
// trip less per job): if it fails after touching the transaction, rollback_job() says so,
// and the executor rolls the whole batch back instead — harmless for the other jobs only
// because none of them had effects outside the transaction either (the executor decides).
//
// Postgres keeps at most 64 subtransaction ids per backend in shared memory before every
// session slows down (subxid overflow), so a batch stops starting jobs after
// kMaxSavepoints savepoints.

#include <pqxx/connection>
#include <pqxx/dbtransaction>
#include <pqxx/transaction>

namespace oncely::detail {

/// Where a job transaction stands, from libpq's local status (no round trip): open, failed
/// (an SQL error, not yet rolled back to a savepoint), or gone (rolled back or no connection).
enum class TransactionState { open, failed, gone };
TransactionState transaction_state(const pqxx::dbtransaction& tx);

class JobTransaction {
 public:
  static constexpr int kMaxSavepoints = 48;

  explicit JobTransaction(pqxx::connection& conn) : work_(conn) {}

  [[nodiscard]] pqxx::work& work() noexcept { return work_; }

  /// Marks the start of the next job's handler; `isolate`: give its writes a savepoint.
  void begin_job(bool isolate) noexcept {
    release_pending_ = release_pending_ || savepoint_open_;
    savepoint_open_ = false;
    touched_ = false;
    isolate_ = isolate;
  }

  /// For JobContext::tx(): the transaction, with this job's savepoint opened first.
  pqxx::work& for_handler() {
    touched_ = true;
    if (isolate_ && !savepoint_open_) {
      work_.exec(release_pending_ ? "RELEASE SAVEPOINT oncely_job; SAVEPOINT oncely_job" : "SAVEPOINT oncely_job");
      release_pending_ = false;
      savepoint_open_ = true;
      ++savepoints_;
    }
    return work_;
  }

  /// Undoes the current job's writes. False when that is impossible: the job wrote without
  /// a savepoint, or the whole transaction is gone (libpqxx ends it on an error raised
  /// through a plain exec()).
  bool rollback_job() noexcept {
    if (!touched_) return true;
    if (!savepoint_open_) return false;
    try {
      work_.exec("ROLLBACK TO SAVEPOINT oncely_job");
      return true;
    } catch (...) {
      return false;
    }
  }

  [[nodiscard]] int savepoints() const noexcept { return savepoints_; }

  /// The batch should stop starting handlers: another savepoint could overflow the cache.
  [[nodiscard]] bool savepoints_exhausted() const noexcept { return savepoints_ >= kMaxSavepoints; }

 private:
  pqxx::work work_;
  bool isolate_ = true;           // the current job's writes get a savepoint
  bool touched_ = false;          // the current job's handler asked for the transaction
  bool savepoint_open_ = false;   // the current job opened a savepoint
  bool release_pending_ = false;  // an earlier job's savepoint is still open
  int savepoints_ = 0;
};

}  // namespace oncely::detail
