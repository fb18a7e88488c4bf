#pragma once
// Rendering SQL for one schema: the only place an identifier is put into SQL text.

#include <string>
#include <string_view>

namespace oncely::detail {

/// The placeholder that migrations and runtime statements use for the schema.
inline constexpr std::string_view kSchemaPlaceholder = ":ONCELY_SCHEMA";

/// `"name"` with embedded quotes doubled. Used once per statement, at render time.
std::string quote_identifier(std::string_view name);

/// Replaces every :ONCELY_SCHEMA in `sql` with the quoted, validated schema name.
std::string render_sql(std::string_view sql, std::string_view schema);

/// The one sentence for a schema at another version than the one `needed_by` ("this worker",
/// "this oncely") needs: older, `schema "s" is at version 3, this worker needs 17: run
/// \`oncely migrate\``; newer, `... newer than this worker knows (17): upgrade oncely`.
std::string schema_version_mismatch(std::string_view schema, int version, int needed, std::string_view needed_by);

/// The NOTIFY channel the jobs trigger uses for this schema.
std::string jobs_channel(std::string_view schema);

}  // namespace oncely::detail
