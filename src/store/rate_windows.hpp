#pragma once
// The rate windows of queues with a `rate` or `per_key_rate` (migration 23): the last starts
// of a queue, or of one of its keys, written by the lease claim (the schema's
// lease_lock_ready()). What is kept here is their upkeep.

#include <pqxx/transaction_base>

#include "store/sql.hpp"

namespace oncely::detail {

class RateWindowsTable {
 public:
  explicit RateWindowsTable(StatementSet& statements);

  /// Removes up to `limit` key windows whose last start is older than their period (a key
  /// that has not started a job since holds nothing a claim counts); returns how many.
  long prune_keys(pqxx::transaction_base& tx, int limit) const;

 private:
  const StatementSet& statements_;
  const Statement* prune_keys_;
};

}  // namespace oncely::detail
