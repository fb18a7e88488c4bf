#pragma once
// AttemptRecord: a worker thread's durable note, in attempts_in_flight, of which jobs its
// open batch transaction is attempting. It is written on a connection other than the
// batch's, in autocommit, before any handler runs, so that it survives the process and the
// batch transaction it describes: whoever claims those jobs next finds it and counts the
// attempts that never finished (Executor). The batch's COMMIT deletes it in the same
// transaction that makes the work permanent (Store::complete_batch), so a record left when
// its batch's backend is gone is an attempt that never finished.
//
// Its life: open() (connect, draw the thread's stats key) -> start() inserts a row for a
// batch -> the batch's COMMIT deletes it, or clear() when the batch rolled back, or retire()
// when its transaction was lost (the row is kept for the next claimer). A row per batch,
// not one per thread rewritten in place: while a held xmin horizon keeps every old version,
// a fresh row has one (migration 0015).
//
// The connection (RecordConnection) is the thread's own, or, behind a pooler, one direct
// connection of the process shared by its threads: a thread whose batch holds one of a
// transaction-mode pool's server connections must never wait for a second one.

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <pqxx/connection>

#include "oncely/database_url.hpp"
#include "store/store.hpp"
#include "support/pooler.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

/// The connection attempt records are written on, (re)connected on first use. Each call
/// runs under its lock, so that one connection can serve every thread of a process.
class RecordConnection {
 public:
  /// `shared`: serves several threads (one thread's lost batch does not drop it unless it
  /// is broken).
  RecordConnection(const Store& store, DatabaseUrl url, std::shared_ptr<spdlog::logger> log, bool shared);
  RecordConnection(const RecordConnection&) = delete;
  RecordConnection& operator=(const RecordConnection&) = delete;

  /// Runs `f(connection)` under the lock, connecting first if need be. Behind a pooler,
  /// a statement that waits for the pool is reported (PoolWaitWatch).
  template <class F>
  auto run(F&& f) {
    std::lock_guard lock(mutex_);
    struct Watched {
      PoolWaitWatch* watch;
      explicit Watched(PoolWaitWatch* w) : watch(w) {
        if (watch) watch->begin();
      }
      ~Watched() {
        if (watch) watch->end();
      }
    } watched(watch_.get());
    ensure_open();
    return f(*conn_);
  }
  [[nodiscard]] bool is_open();
  /// After a thread's connection broke: forgets this one (a shared one only if it is
  /// broken too).
  void drop() noexcept;
  [[nodiscard]] const DatabaseUrl& url() const noexcept { return url_; }

 private:
  void ensure_open();
  const Store& store_;
  DatabaseUrl url_;
  std::shared_ptr<spdlog::logger> log_;
  bool shared_;
  std::mutex mutex_;
  std::unique_ptr<pqxx::connection> conn_;
  std::unique_ptr<PoolWaitWatch> watch_;  // once a connection was found to go through a pooler
};

class AttemptRecord {
 public:
  AttemptRecord(const Store& store, std::shared_ptr<RecordConnection> conn, std::int64_t worker_id);
  AttemptRecord(const AttemptRecord&) = delete;
  AttemptRecord& operator=(const AttemptRecord&) = delete;

  /// Connects, and draws the thread's stats key, if either is missing. Throws on database errors.
  void open();
  [[nodiscard]] bool is_open() const;
  /// Forgets the connection after it broke (the row stays, for the next claimer).
  void drop_connection() noexcept;

  /// The row of the batch in flight (0 while there is none): the batch's completion
  /// deletes it inside the batch transaction.
  [[nodiscard]] std::int64_t id() const noexcept { return id_; }
  /// The thread's stats key, the key of its job_stats rows: the same for all its batches.
  [[nodiscard]] std::int64_t stats_key() const noexcept { return stats_key_; }

  /// Records `job_ids` as the batch in flight (a new row), run by the transaction of backend
  /// `job_backend_pid` (the server's pid: through a pooler, asked in the transaction);
  /// `exclusive`: nothing else was in flight in the process (AttributionGate). Returns
  /// what other records say of these jobs: attempts of theirs that never finished.
  std::vector<UnfinishedAttempts> start(const std::vector<std::int64_t>& job_ids, int job_backend_pid, bool exclusive);
  /// Nothing is in flight any more (the batch rolled back while this worker lives: no
  /// attempt of anyone's): deletes the row.
  void clear();
  /// After the batch transaction was lost: keeps in the record only the jobs whose
  /// handler had started (those attempts count, for whoever claims them next), and lets go
  /// of it. A no-op if the batch committed after all.
  void retire(const std::vector<std::int64_t>& started);

 private:
  const Store& store_;
  std::shared_ptr<RecordConnection> conn_;
  std::int64_t worker_id_;
  std::int64_t id_ = 0;
  std::int64_t stats_key_ = 0;
};

}  // namespace oncely::detail
