#pragma once
// The dead_letters table: the move of a job into it (at run time, in the job's transaction)
// and the operator statements over it (list, group, replay, purge), every filter value a
// parameter and an absent filter a NULL parameter.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <pqxx/transaction_base>

#include "oncely/dead_letters.hpp"
#include "oncely/stats.hpp"
#include "store/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

class DeadLettersTable {
 public:
  explicit DeadLettersTable(StatementSet& statements);

  // ---- at run time ----
  /// Moves a job to dead_letters in the current transaction.
  void move_job(pqxx::transaction_base& tx, const FailureRecord& failure) const;
  /// The same for a job that could not be claimed (so never ran): its attempts stay as
  /// they are, and no errors[] entry is added.
  void move_unclaimed(pqxx::transaction_base& tx, std::int64_t id, const std::string& error,
                      const std::string& dead_letter_class, const nlohmann::json& detail) const;

  // ---- the operator's (on callers' connections: unnamed statements) ----
  [[nodiscard]] DeadLetterList list(pqxx::transaction_base& tx, const DeadLetterFilter& filter, long limit,
                                    bool details) const;
  [[nodiscard]] DeadLetterGroups group(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                                       DeadLetterGrouping by, long limit) const;
  /// One statement replays; a second one (same transaction) reports what was skipped.
  ReplayResult replay(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                      const std::optional<std::string>& to_queue) const;
  long purge(pqxx::transaction_base& tx, const DeadLetterFilter& filter) const;
  /// Keyset paging; without options.payload the statement does not name the payload column.
  [[nodiscard]] DeadLetterPage page(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                                    const DeadLetterPageOptions& options) const;
  /// How many the filter selects (filter.include_replayed as given).
  [[nodiscard]] long count(pqxx::transaction_base& tx, const DeadLetterFilter& filter) const;
  /// May this session's role read the payload columns (of jobs, and of dead_letters)?
  [[nodiscard]] PayloadAccess payload_access(pqxx::transaction_base& tx) const;
  /// Dead letters not replayed, and the rate of new ones over 15 minutes, per queue.
  void read_counts(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                   std::map<std::string, QueueStats>& by_queue) const;

 private:
  const StatementSet& statements_;
  const Statement *move_job_, *counts_;
  std::string list_, group_, replay_, already_replayed_, purge_, page_, page_without_payload_, count_, payload_access_;
  /// One row of the list's and the page's columns.
  static DeadLetter dead_letter_of(const pqxx::row& row);
};

/// Throws ConfigError when a filter value cannot be meant (an empty queue, kind, class or
/// error text: an empty --error would match everything) or a duration is negative.
void validate_filter(const DeadLetterFilter& filter);

/// Throws ConfigError("", "refusing to <verb> every dead letter: give a filter or --all")
/// when `filter` is empty and not `all`.
void require_selection(const DeadLetterFilter& filter, std::string_view verb);

}  // namespace oncely::detail
