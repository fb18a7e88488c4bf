#pragma once
// AttemptRecord: a worker thread's row in attempts_in_flight, the durable note of which jobs
// its open batch transaction is attempting. It is written on a connection of its own, in
// autocommit, before any handler runs, so that it survives the process and the batch
// transaction it describes: whoever claims those jobs next finds it and counts the attempts
// that never finished (Executor). The batch's COMMIT empties it in the same transaction
// that makes the work permanent (Store::complete_batch), so a record that is not empty
// when its connection's backend is gone is an attempt that never finished.
//
// Its life: open() (connect, create the row) -> start() a batch -> clear() when the batch
// is settled, or retire() when its transaction was lost (the record is kept for the next
// claimer and the thread starts a new one) -> the destructor removes the empty row.

#include <cstdint>
#include <memory>
#include <vector>

#include <pqxx/connection>

#include "oncely/database_url.hpp"
#include "store/store.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

class AttemptRecord {
 public:
  AttemptRecord(const Store& store, DatabaseUrl url, std::int64_t worker_id, std::shared_ptr<spdlog::logger> log);
  /// Removes the row if it is empty (a clean exit); best effort, logged.
  ~AttemptRecord();
  AttemptRecord(const AttemptRecord&) = delete;
  AttemptRecord& operator=(const AttemptRecord&) = delete;

  /// Connects and creates the row if either is missing. Throws on database errors.
  void open();
  [[nodiscard]] bool is_open() const;
  /// Forgets the connection after it broke (the row stays, for the next claimer).
  void drop_connection() noexcept;

  /// Its attempts_in_flight id (0 while it has none): the batch's completion empties the
  /// record inside the batch transaction, and job_stats rows are per record.
  [[nodiscard]] std::int64_t id() const noexcept { return id_; }

  /// Writes `job_ids` as the batch in flight, run by the transaction of backend
  /// `job_backend_pid`; `exclusive`: nothing else was in flight in the process
  /// (AttributionGate). Returns what other records say of these jobs: attempts of theirs
  /// that never finished.
  std::vector<UnfinishedAttempts> start(const std::vector<std::int64_t>& job_ids, int job_backend_pid, bool exclusive);
  /// Nothing is in flight any more (the batch rolled back while this worker lives: no
  /// attempt of anyone's).
  void clear();
  /// After the batch transaction was lost: keeps in the record only the jobs whose
  /// handler had started (those attempts count, for whoever claims them next), and lets go
  /// of it; the next open() starts a new one. A no-op if the batch committed after all.
  void retire(const std::vector<std::int64_t>& started);

 private:
  const Store& store_;
  DatabaseUrl url_;
  std::int64_t worker_id_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<pqxx::connection> conn_;
  std::int64_t id_ = 0;
};

}  // namespace oncely::detail
