#pragma once
// The batches table (migrations/0024_dependencies_and_batches.sql): opened and closed through
// the schema's open_batch() and close_batch(), its counters moved by the settlements of its
// members (settle_dependents()); read here for `oncely batches` and the console.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <pqxx/transaction_base>

#include "oncely/batches.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

class BatchesTable {
 public:
  explicit BatchesTable(StatementSet& statements);
  /// open_batch(): the new batch's id. Each callback is JSON text or none.
  [[nodiscard]] std::int64_t open(pqxx::transaction_base& tx, const std::optional<std::string>& on_success,
                                  const std::optional<std::string>& on_failure,
                                  const std::optional<std::string>& on_finish) const;
  /// close_batch(): no member may join from then on (closing twice is no error).
  void close(pqxx::transaction_base& tx, std::int64_t id) const;
  /// Newest first, at most `limit`, ids below `before` when given; `unfinished` only. Without
  /// the callbacks' descriptions.
  [[nodiscard]] std::vector<BatchStatus> list(pqxx::transaction_base& tx, bool unfinished, int limit,
                                              std::optional<std::int64_t> before) const;
  /// One batch; its callbacks' descriptions too when `callbacks` and the role may read them.
  [[nodiscard]] std::optional<BatchStatus> find(pqxx::transaction_base& tx, std::int64_t id, bool callbacks) const;

 private:
  const StatementSet& statements_;
  const Statement *open_, *close_, *list_, *find_, *may_read_callbacks_, *callbacks_;
};

}  // namespace oncely::detail
