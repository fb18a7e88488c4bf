#include "store/advisory_locks.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// Two-key advisory lock: "mtnc" and the schema's hash, so schemas do not share a leader.
constexpr std::string_view kTryMaintenanceLock = R"sql(
  SELECT pg_try_advisory_xact_lock(1836346979, hashtext($1))
)sql";

// Session-level ("mtrc", schema): re-taking a lock this session holds succeeds and stacks,
// so it is taken only while not yet held.
constexpr std::string_view kTryMetricsLeadership = R"sql(
  SELECT EXISTS (SELECT 1 FROM pg_locks
                  WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
                    AND classid = 1836413539 AND objid = hashtext($1)::oid AND objsubid = 2)
      OR pg_try_advisory_lock(1836413539, hashtext($1))
)sql";

}  // namespace

AdvisoryLocks::AdvisoryLocks(StatementSet& statements)
    : statements_(statements),
      maintenance_(&statements.add("try_maintenance_lock", kTryMaintenanceLock)),
      metrics_(&statements.add("try_metrics_leadership", kTryMetricsLeadership)) {}

bool AdvisoryLocks::try_maintenance(pqxx::transaction_base& tx) const {
  return statements_.run(tx, *maintenance_, statements_.schema()).at(0).at(0).as<bool>();
}

bool AdvisoryLocks::try_metrics_leadership(pqxx::transaction_base& tx) const {
  return statements_.run(tx, *metrics_, statements_.schema()).at(0).at(0).as<bool>();
}

}  // namespace oncely::detail
