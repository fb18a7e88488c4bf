#pragma once
// The attempts_in_flight table: one row per worker thread, naming the jobs its open batch
// transaction attempts (see AttemptRecord for its life). Written in autocommit on the
// thread's second connection; the batch's completion empties it in the batch transaction.

#include <cstdint>
#include <vector>

#include <pqxx/transaction_base>

#include "store/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

class AttemptsInFlightTable {
 public:
  explicit AttemptsInFlightTable(StatementSet& statements);

  std::int64_t create(pqxx::transaction_base& tx, std::int64_t worker_id) const;
  /// Writes `job_ids` into record `record`, with the backend pid of the connection whose
  /// transaction runs them; returns, per job, what other records hold for it whose backend
  /// is gone (attempts whose transactions never finished). `exclusive`: the batch runs with
  /// nothing else in flight in this process (AttributionGate).
  std::vector<UnfinishedAttempts> start(pqxx::transaction_base& tx, std::int64_t record, std::int64_t worker_id,
                                        const std::vector<std::int64_t>& job_ids, int job_backend_pid,
                                        bool exclusive) const;
  void clear(pqxx::transaction_base& tx, std::int64_t record) const;
  /// After a batch transaction was lost: keep in the record only the jobs whose handler
  /// had started (their attempts count). A no-op if the batch committed after all.
  void narrow(pqxx::transaction_base& tx, std::int64_t record, const std::vector<std::int64_t>& started) const;
  /// Removes the record if it is empty.
  void remove(pqxx::transaction_base& tx, std::int64_t record) const;

 private:
  const StatementSet& statements_;
  const Statement *create_, *start_, *clear_, *narrow_, *remove_;
};

}  // namespace oncely::detail
