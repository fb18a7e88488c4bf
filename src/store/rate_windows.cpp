#include "store/rate_windows.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// SKIP LOCKED: a window a claim is writing is in use.
constexpr std::string_view kPruneKeys = R"sql(
  DELETE FROM :ONCELY_SCHEMA.key_rate_windows w
   WHERE (w.queue, w.key) IN (
           SELECT s.queue, s.key
             FROM :ONCELY_SCHEMA.key_rate_windows s
             LEFT JOIN :ONCELY_SCHEMA.queue_limits l ON l.queue = s.queue
            WHERE s.starts[cardinality(s.starts)]
                  < now() - coalesce(l.per_key_rate_period_ms, 0) * interval '1 millisecond'
            LIMIT $1
              FOR UPDATE OF s SKIP LOCKED)
)sql";

}  // namespace

RateWindowsTable::RateWindowsTable(StatementSet& statements)
    : statements_(statements), prune_keys_(&statements.add("rate_windows_prune_keys", kPruneKeys)) {}

long RateWindowsTable::prune_keys(pqxx::transaction_base& tx, int limit) const {
  return static_cast<long>(statements_.run(tx, *prune_keys_, limit).affected_rows());
}

}  // namespace oncely::detail
