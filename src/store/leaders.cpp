#include "store/leaders.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// One statement, atomic on the row: inserted when the role has no row; otherwise the
// UPDATE of ON CONFLICT happens only where the WHERE holds (the lease has expired, or it is
// ours), so RETURNING gives a row exactly when we hold the role now. Two takers at once
// serialise on the row lock, and the second sees the first's fresh expires_at.
constexpr std::string_view kTakeLease = R"sql(
  INSERT INTO :ONCELY_SCHEMA.leaders AS l (role, worker_id, expires_at)
  VALUES ($1, $2, now() + make_interval(secs => $3::double precision / 1000))
  ON CONFLICT (role) DO UPDATE SET worker_id = EXCLUDED.worker_id, expires_at = EXCLUDED.expires_at
   WHERE l.expires_at < now() OR l.worker_id = EXCLUDED.worker_id
  RETURNING worker_id
)sql";

constexpr std::string_view kReleaseLease = R"sql(
  DELETE FROM :ONCELY_SCHEMA.leaders WHERE role = $1 AND worker_id = $2
)sql";

}  // namespace

LeadersTable::LeadersTable(StatementSet& statements)
    : statements_(statements),
      take_(&statements.add("take_leader_lease", kTakeLease)),
      release_(&statements.add("release_leader_lease", kReleaseLease)) {}

bool LeadersTable::take(pqxx::transaction_base& tx, std::string_view role, std::int64_t worker_id,
                        std::chrono::milliseconds lease) const {
  return !statements_.run(tx, *take_, std::string(role), worker_id, static_cast<std::int64_t>(lease.count())).empty();
}

void LeadersTable::release(pqxx::transaction_base& tx, std::string_view role, std::int64_t worker_id) const {
  statements_.run(tx, *release_, std::string(role), worker_id);
}

}  // namespace oncely::detail
