// Applies the embedded migrations: one transaction, one per-schema advisory lock.

#include <algorithm>
#include <set>

#include <pqxx/pqxx>

#include "db.hpp"
#include "embedded_migrations.hpp"
#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "schema.hpp"

namespace oncely {
namespace {

// First key of the two-key advisory lock ("once"); the second is hashtext(schema), so
// migrations of different schemas (tests run many) do not wait for each other.
constexpr int kMigrateLockClass = 0x6F6E6365;

constexpr std::string_view kCreateSchema = "CREATE SCHEMA IF NOT EXISTS :ONCELY_SCHEMA";
constexpr std::string_view kCreateMigrationsTable = R"sql(
  CREATE TABLE IF NOT EXISTS :ONCELY_SCHEMA.schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    breaking   boolean     NOT NULL DEFAULT false,
    applied_at timestamptz NOT NULL DEFAULT now()
  )
)sql";
constexpr std::string_view kAppliedVersions = "SELECT version FROM :ONCELY_SCHEMA.schema_migrations";
constexpr std::string_view kRecordVersion =
    "INSERT INTO :ONCELY_SCHEMA.schema_migrations (version, name, breaking) VALUES ($1, $2, $3)";

}  // namespace

int latest_schema_version() {
  const auto& all = detail::embedded_migrations();
  return all.empty() ? 0 : all.back().version;
}

MigrationResult migrate(const DatabaseUrl& url, std::string_view schema) {
  validate_schema_name(schema);
  const auto render = [&](std::string_view sql) { return detail::render_sql(sql, schema); };
  auto conn = detail::connect(url);
  MigrationResult result;
  int current = 0;
  try {
    pqxx::work tx{*conn, "oncely_migrate"};
    // IF NOT EXISTS notices are expected on every run after the first; keep them quiet.
    tx.exec("SET LOCAL client_min_messages = warning");
    tx.exec_params("SELECT pg_advisory_xact_lock($1, hashtext($2))", kMigrateLockClass, std::string(schema));
    tx.exec(render(kCreateSchema));
    tx.exec(render(kCreateMigrationsTable));
    std::set<int> applied;
    for (const auto& row : tx.exec(render(kAppliedVersions))) applied.insert(row[0].as<int>());
    const int newest_known = latest_schema_version();
    if (!applied.empty() && *applied.rbegin() > newest_known) {
      throw DatabaseError("schema \"" + std::string(schema) + "\" is at version " + std::to_string(*applied.rbegin()) +
                          ", newer than this oncely binary knows (" + std::to_string(newest_known) +
                          "); upgrade oncely before running it against this database");
    }
    for (const auto& migration : detail::embedded_migrations()) {
      if (applied.contains(migration.version)) continue;
      try {
        tx.exec(render(migration.sql));
      } catch (const pqxx::sql_error& e) {
        throw DatabaseError("migration " + std::to_string(migration.version) + " (" + std::string(migration.name) +
                            ") failed: " + detail::one_line(url, e.what()));
      }
      tx.exec_params(render(kRecordVersion), migration.version, std::string(migration.name), migration.breaking);
      result.applied.push_back(migration.version);
    }
    current = std::max(applied.empty() ? 0 : *applied.rbegin(), newest_known);
    tx.commit();
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("lost the connection to " + url.redacted() + " while migrating: " + detail::one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw DatabaseError("migrating schema \"" + std::string(schema) + "\" failed: " + detail::one_line(url, e.what()));
  }
  result.version = current;
  return result;
}

}  // namespace oncely
