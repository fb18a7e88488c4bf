#pragma once
// The job_stats table: per worker thread's attempt record, per minute and queue, what the
// committed transactions did (completed, deduplicated, retried, dead-lettered, crashed, run
// time). Written in the transactions that decide the outcomes, read by `oncely stats`,
// `check` and the metrics, pruned by maintenance.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pqxx/transaction_base>

#include "oncely/records.hpp"
#include "store/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

class JobStatsTable {
 public:
  explicit JobStatsTable(StatementSet& statements);

  /// The upsert that adds a transaction's outcomes, with its parameters numbered from
  /// `first`: record id, queue, then the six counters. Also part of the batch's completion.
  static std::string count_outcomes_sql(int first);

  /// Adds outcomes to job_stats (for transactions other than a batch's completion).
  void count_outcomes(pqxx::transaction_base& tx, std::int64_t record, std::string_view queue,
                      const OutcomeCounts& counts) const;
  /// Deletes up to `limit` rows older than `window`; returns how many.
  long prune(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const;
  /// Outcome rates over the last 1, 5 and 15 minutes, into the queues of `by_queue`
  /// (`queue`: only that one).
  void read_rates(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                  std::map<std::string, QueueStats>& by_queue) const;
  /// `buckets` buckets of `bucket_minutes` each, the last one ending with the current
  /// minute, oldest first, every bucket present (zeros where nothing happened).
  [[nodiscard]] std::vector<OutcomeBucket> history(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                                                   int buckets, int bucket_minutes) const;

 private:
  const StatementSet& statements_;
  const Statement *count_outcomes_, *prune_, *rates_;
  std::string history_;
};

/// The entry of `by_queue` for `name`, created with its name if missing.
QueueStats& queue_entry(std::map<std::string, QueueStats>& by_queue, const std::string& name);

}  // namespace oncely::detail
