#pragma once
// The processed_jobs table: the dedup markers, one per (kind, idempotency key) processed.
// The claim inserts them (JobsTable::claim), a failure or a release deletes its own, and
// maintenance prunes those older than the dedup window.

#include <chrono>

#include <pqxx/transaction_base>

#include "store/sql.hpp"

namespace oncely::detail {

class ProcessedJobsTable {
 public:
  explicit ProcessedJobsTable(StatementSet& statements);
  /// Deletes up to `limit` markers older than `window`; returns how many.
  long prune(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const;

 private:
  const StatementSet& statements_;
  const Statement* prune_;
};

}  // namespace oncely::detail
