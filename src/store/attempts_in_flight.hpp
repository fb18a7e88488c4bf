#pragma once
// The attempts_in_flight table: one row per batch in flight, naming the jobs its batch
// transaction attempts (see AttemptRecord for its life). Written in autocommit on the
// thread's second connection; the batch's completion deletes it in the batch transaction.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <pqxx/transaction_base>

#include "store/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

/// What starting a record returns: the new row, and what other records hold for its jobs
/// whose backend is gone (attempts whose transactions never finished).
struct StartedRecord {
  std::int64_t id = 0;
  std::vector<UnfinishedAttempts> unfinished;
};

/// `sql` with every :SPAN_OF_IDS replaced by the span of the job ids in its parameter $1
/// (an int8range, the key of the job_span index): the record's writer and the statements
/// that look records up by job id agree on it by construction.
std::string with_span_of_ids(std::string_view sql);

class AttemptsInFlightTable {
 public:
  explicit AttemptsInFlightTable(StatementSet& statements);

  /// A thread's stats key: the key of its job_stats rows, for as long as it runs.
  std::int64_t new_stats_key(pqxx::transaction_base& tx) const;
  /// Inserts the record of a batch of `job_ids`, run by the transaction of backend
  /// `job_backend_pid`. `exclusive`: the batch runs with nothing else in flight in this
  /// process (AttributionGate).
  StartedRecord start(pqxx::transaction_base& tx, std::int64_t worker_id, const std::vector<std::int64_t>& job_ids,
                      int job_backend_pid, bool exclusive) const;
  /// Deletes record `record`: its batch is settled (also part of the batch's completion).
  void clear(pqxx::transaction_base& tx, std::int64_t record) const;
  /// After a batch transaction was lost: keep in the record only the jobs whose handler
  /// had started (their attempts count), or delete it if none is left. A no-op if the batch
  /// committed after all.
  void narrow(pqxx::transaction_base& tx, std::int64_t record, const std::vector<std::int64_t>& started) const;

 private:
  const StatementSet& statements_;
  const Statement *new_stats_key_, *start_, *clear_, *narrow_, *remove_empty_;
};

}  // namespace oncely::detail
