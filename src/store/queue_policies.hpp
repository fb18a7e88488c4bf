#pragma once
// The queue_policies table (migration 18): one row per queue with the policy every worker
// of the queue applies, C++ or SQL (support/queue_policy.hpp), and its limits across
// workers, a row of queue_limits (migration 22) written by set_queue_limits(). Written by a
// worker started with --config (its file wins) and by `oncely queue set`; read by `queue
// show` and `list`.

#include <map>
#include <optional>
#include <string>

#include <pqxx/transaction_base>

#include "oncely/config.hpp"
#include "oncely/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

class QueuePoliciesTable {
 public:
  explicit QueuePoliciesTable(StatementSet& statements);

  /// The stored policy of `queue` (its policy fields of a QueueConfig; the rest default),
  /// or nothing when the queue has no row.
  [[nodiscard]] std::optional<QueueConfig> read(pqxx::transaction_base& tx, const std::string& queue) const;
  /// The stored policy, or the defaults with the queue's limits (limits set in SQL, or by
  /// `queue set` on a queue without a row): `stored` says which.
  [[nodiscard]] QueueConfig read_or_defaults(pqxx::transaction_base& tx, const std::string& queue, bool& stored) const;
  /// Every stored policy, by queue.
  [[nodiscard]] std::map<std::string, QueueConfig> list(pqxx::transaction_base& tx) const;
  /// Stores `policy`'s policy fields as `queue`'s row (inserted or replaced).
  void write(pqxx::transaction_base& tx, const std::string& queue, const QueueConfig& policy) const;
  /// What the limits of each limited queue (or of `queue`) hold back now, into its
  /// QueueStats: running_under_limits, held_by_limit, keys_at_limit.
  void read_held_back(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                      std::map<std::string, QueueStats>& by_queue) const;

 private:
  const StatementSet& statements_;
  std::string read_, read_limits_, list_, write_, write_limits_, limits_held_;
};

}  // namespace oncely::detail
