#pragma once
// The lease_completions table (migration 18): a lease-mode job that its exec or http handler
// completed itself (complete_job() with the token the worker passed it) leaves the token
// here, for its worker to count the completion (not a lost lease).

#include <chrono>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include <pqxx/transaction_base>

#include "store/sql.hpp"

namespace oncely::detail {

class LeaseCompletionsTable {
 public:
  explicit LeaseCompletionsTable(StatementSet& statements);

  /// Of `tokens`, those whose job its handler completed; their rows go.
  [[nodiscard]] std::unordered_set<std::int64_t> take(pqxx::transaction_base& tx,
                                                      const std::vector<std::int64_t>& tokens) const;
  /// Of `tokens`, those whose job its handler completed (rows kept, for take()).
  [[nodiscard]] std::unordered_set<std::int64_t> completed(pqxx::transaction_base& tx,
                                                           const std::vector<std::int64_t>& tokens) const;
  /// Removes up to `limit` rows older than `kept` (a worker that died before reading its
  /// own); returns how many.
  long prune(pqxx::transaction_base& tx, std::chrono::milliseconds kept, int limit) const;

 private:
  const StatementSet& statements_;
  const Statement *take_, *completed_, *prune_;
};

}  // namespace oncely::detail
