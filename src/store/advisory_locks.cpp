#include "store/advisory_locks.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// Two-key advisory lock: "mtnc" and the schema's hash, so schemas do not share a leader.
constexpr std::string_view kTryMaintenanceLock = R"sql(
  SELECT pg_try_advisory_xact_lock(1836346979, hashtext($1))
)sql";

}  // namespace

AdvisoryLocks::AdvisoryLocks(StatementSet& statements)
    : statements_(statements), maintenance_(&statements.add("try_maintenance_lock", kTryMaintenanceLock)) {}

bool AdvisoryLocks::try_maintenance(pqxx::transaction_base& tx) const {
  return statements_.run(tx, *maintenance_, statements_.schema()).at(0).at(0).as<bool>();
}

}  // namespace oncely::detail
