#pragma once
// The leaders table (migration 0012): one row per role ("metrics": the process that exports
// the database gauges), a lease held by one worker until it expires. Taken and renewed by
// one statement, on any connection (a transaction-mode pooler's too): no session state.

#include <chrono>
#include <cstdint>
#include <string_view>

#include <pqxx/transaction_base>

#include "store/sql.hpp"

namespace oncely::detail {

/// The role of the process that exports the database's view of the queues as gauges.
inline constexpr std::string_view kMetricsRole = "metrics";

class LeadersTable {
 public:
  explicit LeadersTable(StatementSet& statements);

  /// Takes `role` for `lease` if nobody holds it or its holder's lease has expired, or
  /// renews it if `worker_id` holds it; returns whether `worker_id` holds it now.
  bool take(pqxx::transaction_base& tx, std::string_view role, std::int64_t worker_id,
            std::chrono::milliseconds lease) const;
  /// Gives `role` up if `worker_id` holds it (a clean exit: the next taker need not wait).
  void release(pqxx::transaction_base& tx, std::string_view role, std::int64_t worker_id) const;

 private:
  const StatementSet& statements_;
  const Statement *take_, *release_;
};

}  // namespace oncely::detail
