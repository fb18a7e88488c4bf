// Applies the embedded migrations: one transaction, one per-schema advisory lock.

#include <algorithm>
#include <set>

#include <pqxx/pqxx>

#include "api/embedded_migrations.hpp"
#include "api/roles.hpp"
#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "store/store.hpp"
#include "support/db.hpp"
#include "support/schema.hpp"

namespace oncely {
namespace {

// A function is executable by PUBLIC when created, and no per-schema default privilege can
// change that (migration 0011): every migrate that applied something revokes it again, so
// that a function a migration adds is only for the roles granted it. Except the functions
// the runtime's own statements call that run with their caller's privileges and can do
// nothing the caller could not do directly: error_entry() (migration 17), which reads and
// writes nothing, and the dead-letter move and the lease claim's two statements (migration
// 18; the first one's scan in claim order is lease_lock_in_order() since migration 22), and the retry decision's two
// functions (migration 19), which read and write nothing, and the fenced completion (migration 19), which does only
// what its caller may, with output_refusal() (migration 27), which reads nothing, and the limits' functions of
// migration 23: rate_window() and limits_retry_in(), which write nothing, and the claims' queue_keys(), ready_by_key(),
// lock_ready_limited() and lock_key_slot() and the operators' queue_limits_held(), which read or lock what the caller
// may; and settle_dependents() (migration 24), which acts only on jobs that have left the queue and only once (the
// dead-letter move and the fenced completion call it). Every role may call them, as a built-in function, so that a
// worker role granted the tables by hand needs no grant for them.
constexpr std::string_view kRevokeFunctionsFromPublic = R"sql(
  REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA :ONCELY_SCHEMA FROM PUBLIC;
  GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.error_entry(integer, timestamptz, text, text, jsonb),
                            :ONCELY_SCHEMA.dead_letter_job(bigint, integer, text, text, text, jsonb),
                            :ONCELY_SCHEMA.lease_lock_ready(text, integer, smallint, bigint, bigint),
                            :ONCELY_SCHEMA.lease_lock_in_order(text, integer, smallint, bigint, bigint),
                            :ONCELY_SCHEMA.lease_locked(bigint[], bigint, text, bigint, integer, text),
                            :ONCELY_SCHEMA.backoff_delay(interval, interval, text, interval[], integer, float8),
                            :ONCELY_SCHEMA.failure_outcome(text, integer, integer),
                            :ONCELY_SCHEMA.complete_leases(bigint[], bigint[]),
                            :ONCELY_SCHEMA.complete_leases(bigint[], bigint[], jsonb[], interval[], text[], text),
                            :ONCELY_SCHEMA.output_refusal(bigint),
                            :ONCELY_SCHEMA.rate_window(timestamptz[], timestamptz, integer),
                            :ONCELY_SCHEMA.limits_retry_in(text),
                            :ONCELY_SCHEMA.queue_keys(text),
                            :ONCELY_SCHEMA.ready_by_key(text, integer, jsonb),
                            :ONCELY_SCHEMA.lock_ready_limited(text, integer, bigint[], interval),
                            :ONCELY_SCHEMA.lock_key_slot(text, text, integer),
                            :ONCELY_SCHEMA.queue_limits_held(text),
                            :ONCELY_SCHEMA.settle_dependents(bigint[], text)
    TO PUBLIC
)sql";

}  // namespace

int latest_schema_version() {
  const auto& all = detail::embedded_migrations();
  return all.empty() ? 0 : all.back().version;
}

MigrationResult migrate(const DatabaseUrl& url, std::string_view schema) {
  const detail::Store store(schema);  // validates the schema name before connecting
  const detail::SchemaMigrationsTable& versions = store.schema_migrations;
  auto conn = detail::connect(url);
  MigrationResult result;
  int current = 0;
  try {
    pqxx::work tx{*conn, "oncely_migrate"};
    // IF NOT EXISTS notices are expected on every run after the first; keep them quiet.
    tx.exec("SET LOCAL client_min_messages = warning");
    tx.exec_params("SELECT pg_advisory_xact_lock($1, hashtext($2))", detail::kMigrateLockClass, std::string(schema));
    versions.create(tx);
    const std::set<int> applied = versions.applied(tx);
    const int newest_known = latest_schema_version();
    if (!applied.empty() && *applied.rbegin() > newest_known) {
      throw DatabaseError("schema \"" + std::string(schema) + "\" is at version " + std::to_string(*applied.rbegin()) +
                          ", newer than this oncely binary knows (" + std::to_string(newest_known) +
                          "); upgrade oncely before running it against this database");
    }
    for (const auto& migration : detail::embedded_migrations()) {
      if (applied.contains(migration.version)) continue;
      try {
        tx.exec(detail::render_sql(migration.sql, schema));
      } catch (const pqxx::sql_error& e) {
        throw DatabaseError("migration " + std::to_string(migration.version) + " (" + std::string(migration.name) +
                            ") failed: " + detail::one_line(url, e.what()));
      }
      versions.record(tx, migration.version, migration.name);
      result.applied.push_back(migration.version);
    }
    if (!result.applied.empty()) {
      tx.exec(detail::render_sql(kRevokeFunctionsFromPublic, schema));
      // A new table or column is granted to the schema's roles at once (migrate --roles made them).
      if (detail::schema_roles_exist(tx, schema)) detail::apply_roles(tx, schema);
    }
    current = std::max(applied.empty() ? 0 : *applied.rbegin(), newest_known);
    tx.commit();
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("lost the connection to " + url.redacted() +
                        " while migrating: " + detail::one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw DatabaseError("migrating schema \"" + std::string(schema) + "\" failed: " + detail::one_line(url, e.what()));
  }
  result.version = current;
  return result;
}

}  // namespace oncely
