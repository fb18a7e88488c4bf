#pragma once
// The queue_pauses table: one row per paused queue (migration 0009). Written by the
// operator's pause and resume, read by every worker's pause watcher and by stats.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <pqxx/transaction_base>

#include "oncely/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

class QueuePausesTable {
 public:
  explicit QueuePausesTable(StatementSet& statements);

  /// Pauses `queue` (no-op when it is paused already); returns its pause and whether this
  /// call made it.
  std::pair<QueuePause, bool> pause(pqxx::transaction_base& tx, const std::string& queue,
                                    const std::optional<std::string>& reason) const;
  /// Removes the pause; returns the pause removed, if there was one.
  std::optional<QueuePause> resume(pqxx::transaction_base& tx, const std::string& queue) const;
  /// Every pause, by queue.
  [[nodiscard]] std::vector<QueuePause> list(pqxx::transaction_base& tx) const;
  /// Which of `queues` are paused (the watcher's poll: a primary-key probe per queue).
  [[nodiscard]] std::vector<std::string> paused_among(pqxx::transaction_base& tx,
                                                      const std::vector<std::string>& queues) const;
  /// The pauses into `by_queue` (`queue`: only that one), for stats.
  void read_pauses(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                   std::map<std::string, QueueStats>& by_queue) const;
  /// The distinct queue names of jobs, one index descent each (a skip scan over the claim
  /// index: fast on a table of millions of jobs in few queues).
  [[nodiscard]] std::vector<std::string> job_queues(pqxx::transaction_base& tx) const;

 private:
  const StatementSet& statements_;
  const Statement *pause_, *resume_, *list_, *paused_among_, *job_queues_;
};

/// The NOTIFY channel of the pauses trigger for this schema.
std::string queue_pauses_channel(std::string_view schema);

}  // namespace oncely::detail
