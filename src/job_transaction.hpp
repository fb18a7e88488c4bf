#pragma once
// JobTransaction: one batch's transaction and the savepoints that isolate its handlers.
//
// A handler that never touches the transaction (exec and http handlers, most no-op or
// external-effect C++ handlers) costs no savepoint. The first JobContext::tx() call of a
// job opens one, merging the previous job's RELEASE into the same round trip. A failing
// handler's writes are undone with ROLLBACK TO SAVEPOINT. Postgres keeps at most 64
// subtransaction ids per backend in shared memory before every session slows down
// (subxid overflow), so a batch stops starting jobs after kMaxSavepoints savepoints.

#include <pqxx/connection>
#include <pqxx/transaction>

namespace oncely::detail {

class JobTransaction {
 public:
  static constexpr int kMaxSavepoints = 48;

  explicit JobTransaction(pqxx::connection& conn) : work_(conn) {}

  [[nodiscard]] pqxx::work& work() noexcept { return work_; }

  /// Marks the start of the next job's handler.
  void begin_job() noexcept {
    release_pending_ = release_pending_ || savepoint_open_;
    savepoint_open_ = false;
  }

  /// For JobContext::tx(): the transaction, with this job's savepoint opened first.
  pqxx::work& for_handler() {
    if (!savepoint_open_) {
      work_.exec(release_pending_ ? "RELEASE SAVEPOINT oncely_job; SAVEPOINT oncely_job" : "SAVEPOINT oncely_job");
      release_pending_ = false;
      savepoint_open_ = true;
      ++savepoints_;
    }
    return work_;
  }

  /// Undoes the current job's writes. False when that is impossible because the whole
  /// transaction is gone (libpqxx ends it on an error raised through a plain exec()).
  bool rollback_job() noexcept {
    if (!savepoint_open_) return true;
    try {
      work_.exec("ROLLBACK TO SAVEPOINT oncely_job");
      return true;
    } catch (...) {
      return false;
    }
  }

  /// Whether the current job's handler opened a savepoint.
  [[nodiscard]] bool job_used_transaction() const noexcept { return savepoint_open_; }

  [[nodiscard]] int savepoints() const noexcept { return savepoints_; }

  /// The batch should stop starting handlers: another savepoint could overflow the cache.
  [[nodiscard]] bool savepoints_exhausted() const noexcept { return savepoints_ >= kMaxSavepoints; }

 private:
  pqxx::work work_;
  bool savepoint_open_ = false;   // the current job opened a savepoint
  bool release_pending_ = false;  // an earlier job's savepoint is still open
  int savepoints_ = 0;
};

}  // namespace oncely::detail
