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
/// and from several processes at once. Throws ConfigError for a bad schema name and
/// DatabaseError when the database is unreachable or its schema is newer than this binary.
MigrationResult migrate(const DatabaseUrl& url, std::string_view schema);

/// The newest schema version this binary knows.
int latest_schema_version();

}  // namespace oncely
