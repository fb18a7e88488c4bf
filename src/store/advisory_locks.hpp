#pragma once
// The advisory lock that elects one process per schema for a maintenance pass. It is
// transaction-scoped (held until the pass's transaction ends), so it holds behind a
// transaction-mode pooler too; the metrics exporter is elected by a lease row instead
// (leaders.hpp), since it must hold between transactions. No table: the key is
// ("mtnc", hashtext(schema)), so schemas do not share a leader.

#include <pqxx/transaction_base>

#include "store/sql.hpp"

namespace oncely::detail {

class AdvisoryLocks {
 public:
  explicit AdvisoryLocks(StatementSet& statements);
  /// Takes this schema's maintenance lock for the rest of `tx` if nobody holds it.
  bool try_maintenance(pqxx::transaction_base& tx) const;

 private:
  const StatementSet& statements_;
  const Statement* maintenance_;
};

}  // namespace oncely::detail
