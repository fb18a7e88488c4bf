#pragma once
// The advisory locks that elect one process per schema: for a maintenance pass
// (transaction-scoped) and for exporting the database's view of the queues as metrics
// (session-scoped, on the heartbeat's connection). No table: keys are ("mtnc" | "mtrc",
// hashtext(schema)), so schemas do not share a leader.

#include <pqxx/transaction_base>

#include "store/sql.hpp"

namespace oncely::detail {

class AdvisoryLocks {
 public:
  explicit AdvisoryLocks(StatementSet& statements);
  /// Takes this schema's maintenance lock for the rest of `tx` if nobody holds it.
  bool try_maintenance(pqxx::transaction_base& tx) const;
  /// Takes (or confirms) this session's hold on the schema's metrics leadership: a
  /// session-level lock, kept until the connection closes. Not for pooled connections.
  bool try_metrics_leadership(pqxx::transaction_base& tx) const;

 private:
  const StatementSet& statements_;
  const Statement *maintenance_, *metrics_;
};

}  // namespace oncely::detail
