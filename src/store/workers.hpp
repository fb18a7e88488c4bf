#pragma once
// The workers table: one row per running worker process, refreshed by its heartbeat;
// stale rows (and attempt records nobody needs any more) are removed by maintenance.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <pqxx/transaction_base>

#include "oncely/records.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

/// How often a process refreshes its registration, and when others consider it gone.
inline constexpr auto kHeartbeatInterval = std::chrono::seconds(5);
inline constexpr auto kStaleAfter = std::chrono::seconds(60);

class WorkersTable {
 public:
  explicit WorkersTable(StatementSet& statements);

  std::int64_t register_worker(pqxx::transaction_base& tx, const std::string& host, int pid,
                               const std::vector<std::string>& queues) const;
  /// Refreshes the registration (re-creating it if it was removed as stale).
  void heartbeat(pqxx::transaction_base& tx, std::int64_t worker_id, int jobs_in_flight, const std::string& host,
                 int pid, const std::vector<std::string>& queues) const;
  void unregister(pqxx::transaction_base& tx, std::int64_t worker_id) const;
  /// Removes workers whose heartbeat is older than `stale_after`, and attempt records that
  /// can no longer matter (empty ones of gone workers; ones whose jobs are all gone).
  void remove_stale(pqxx::transaction_base& tx, std::chrono::milliseconds stale_after) const;
  /// The registered workers (`queue`: those serving it), by id.
  [[nodiscard]] std::vector<WorkerInfo> list(pqxx::transaction_base& tx, const std::optional<std::string>& queue) const;

 private:
  const StatementSet& statements_;
  const Statement *register_, *heartbeat_, *unregister_, *remove_stale_, *list_;
};

}  // namespace oncely::detail
