#pragma once
// The cron_slots table: one row per cron entry, shared by every worker that carries it
// (migrations/0010_cron.sql). The scheduler reads the rows with the database's clock and
// enqueues a slot's job in the one statement that moves the entry's row forward.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <pqxx/transaction_base>

#include "store/sql.hpp"
#include "support/cron_expression.hpp"

namespace oncely::detail {

struct CronSlotsRead {
  cron::Instant now{};  ///< the database's clock
  struct Row {
    std::optional<cron::Instant> covered_until;  ///< unset: no row yet
    std::string fingerprint;
    std::optional<cron::Instant> last_enqueued_slot;
    std::string name;
  };
  std::vector<Row> rows;  ///< one per name asked for, in that order
};

/// What one advancing statement does for one entry.
struct CronAdvance {
  std::string name;
  std::string fingerprint;
  cron::Instant covered_until{};
  std::vector<cron::Instant> slots;  ///< jobs to enqueue, oldest first (those after the row's old position)
  std::vector<std::string> keys;     ///< their idempotency keys
  std::string queue;
  std::string kind;
  std::string payload;  ///< JSON text
  int priority = 0;
  std::optional<int> max_attempts;
  /// The entry had no row when read: create it, but move none another worker created since.
  bool first = false;
};

class CronSlotsTable {
 public:
  explicit CronSlotsTable(StatementSet& statements);
  /// The rows of `names` and the database's now, in one statement. `names` not empty.
  [[nodiscard]] CronSlotsRead read(pqxx::transaction_base& tx, const std::vector<std::string>& names) const;
  /// Every row, by name, and the database's now (`oncely cron list` without a config).
  [[nodiscard]] CronSlotsRead read_all(pqxx::transaction_base& tx) const;
  /// Moves the entry's row to covered_until (creating it) if that is forward, and enqueues
  /// the given slots that lie after the row's old position: one statement. Returns the
  /// number of jobs enqueued; nullopt if the row was not moved (another worker was ahead).
  std::optional<long> advance(pqxx::transaction_base& tx, const CronAdvance& a) const;

 private:
  const StatementSet& statements_;
  const Statement *read_, *read_all_, *advance_;
};

}  // namespace oncely::detail
