#pragma once
// The processed_jobs table: the dedup markers, one per (kind, idempotency key) processed,
// each the completed job's record (schema 27). The claim inserts them (JobsTable::claim)
// and the completion fills them in, a failure or a release deletes its own, maintenance
// prunes those older than the dedup window, and operators read them (list).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <pqxx/transaction_base>

#include "oncely/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

class ProcessedJobsTable {
 public:
  explicit ProcessedJobsTable(StatementSet& statements);
  /// Deletes up to `limit` markers older than `window`; returns how many.
  long prune(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const;
  /// Completed jobs matching `filter`, ids below `before`, newest first.
  [[nodiscard]] CompletedJobPage list(pqxx::transaction_base& tx, const CompletedJobFilter& filter, long limit,
                                      std::optional<std::int64_t> before, bool with_output) const;

 private:
  const StatementSet& statements_;
  const Statement* prune_;
  std::string list_, list_by_key_;  // run unprepared: planned with their values
};

}  // namespace oncely::detail
