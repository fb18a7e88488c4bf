#pragma once
// The processed_jobs table: the dedup markers, one per (kind, idempotency key) processed,
// each the completed job's record (schema 27), with transaction_completions, the rows of
// transaction-mode batches that hold the rest of theirs. The claim inserts markers
// (JobsTable::claim) and a batch's completion its row, a failure or a release deletes its
// own marker, maintenance prunes both past the dedup window, and operators read them as one
// (the completed_jobs view: list).

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
  /// Deletes up to `limit` transaction-mode completion rows (transaction_completions, the
  /// rest of those records) older than `window`; returns how many.
  long prune_completions(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const;
  /// Completed jobs matching `filter`, ids below `before`, newest first.
  [[nodiscard]] CompletedJobPage list(pqxx::transaction_base& tx, const CompletedJobFilter& filter, long limit,
                                      std::optional<std::int64_t> before, bool with_output) const;

 private:
  const StatementSet& statements_;
  const Statement *prune_, *prune_completions_;
  std::string list_, list_by_key_;  // run unprepared: planned with their values
};

}  // namespace oncely::detail
