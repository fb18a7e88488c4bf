#pragma once
// Schema administration: naming rules and migrations.

#include <string>
#include <string_view>
#include <vector>

#include "oncely/database_url.hpp"

namespace oncely {

/// The schema oncely uses unless told otherwise (--schema / ONCELY_SCHEMA).
inline constexpr std::string_view kDefaultSchema = "oncely";

/// Throws ConfigError unless `name` is a plain lower-case SQL identifier that oncely can
/// use as a schema name: [a-z_][a-z0-9_]*, at most 48 bytes (the NOTIFY channel
/// "<schema>.jobs" must fit in 63), and not starting with "pg_" (reserved by Postgres).
void validate_schema_name(std::string_view name);

struct MigrationResult {
  std::vector<int> applied;  ///< versions applied by this call, ascending
  int version = 0;           ///< the schema version after the call
};

/// Creates or upgrades `schema` to the newest migration embedded in this binary.
/// Runs in one transaction under a per-schema advisory lock, so it is safe to run twice
/// and from several processes at once. When it applies a migration it also revokes EXECUTE
/// from PUBLIC on the schema's functions and, if the schema's roles exist (migrate_roles),
/// re-applies their privileges, so that a new table or function is covered at once.
/// Throws ConfigError for a bad schema name and DatabaseError when the database is
/// unreachable or its schema is newer than this binary.
MigrationResult migrate(const DatabaseUrl& url, std::string_view schema);

/// The newest schema version this binary knows.
int latest_schema_version();

/// The least-privilege group roles of one schema (NOLOGIN; a DBA grants them to login roles).
struct SchemaRoles {
  std::string producer;   ///< "<schema>_producer": enqueue only
  std::string worker;     ///< "<schema>_worker": what `oncely worker` needs, no DDL
  std::string operator_;  ///< "<schema>_operator": dlq, jobs, queue, stats, check, cron list
  std::string viewer;     ///< "<schema>_viewer": stats, check, read-only pages, no payloads
};

/// The role names of `schema` (validated; at most 57 bytes, within PostgreSQL's 63).
SchemaRoles schema_roles(std::string_view schema);

struct RolesResult {
  std::vector<std::string> created;  ///< roles this call created (the others existed)
};

/// Creates the roles of `schema` that are missing and converges their privileges on the
/// schema's objects to exactly the documented ones (revoking any other), in one transaction
/// under the migrator's lock. The schema must be migrated to the newest version. Safe to run
/// again. Creating a role needs CREATEROLE (or a superuser), granting needs the tables' owner:
/// throws DatabaseError with one line saying so otherwise.
RolesResult migrate_roles(const DatabaseUrl& url, std::string_view schema);

}  // namespace oncely
