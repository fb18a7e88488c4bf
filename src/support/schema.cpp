#include "support/schema.hpp"

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"

namespace oncely {

void validate_schema_name(std::string_view name) {
  const auto fail = [&](const std::string& why) {
    throw ConfigError("schema", "invalid schema name '" + std::string(name) + "': " + why);
  };
  if (name.empty()) fail("it is empty");
  if (name.size() > 48) fail("longer than 48 characters");
  if (name.starts_with("pg_")) fail("the prefix pg_ is reserved by PostgreSQL");
  if (!(name[0] == '_' || (name[0] >= 'a' && name[0] <= 'z'))) {
    fail("must start with a lower-case letter or underscore");
  }
  for (const char c : name) {
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) {
      fail("only lower-case letters, digits and underscores are allowed");
    }
  }
}

namespace detail {

std::string quote_identifier(std::string_view name) {
  std::string out = "\"";
  for (const char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string render_sql(std::string_view sql, std::string_view schema) {
  validate_schema_name(schema);
  const std::string quoted = quote_identifier(schema);
  std::string out;
  out.reserve(sql.size() + 64);
  std::size_t pos = 0;
  for (std::size_t hit = sql.find(kSchemaPlaceholder); hit != std::string_view::npos;
       hit = sql.find(kSchemaPlaceholder, pos)) {
    out.append(sql.substr(pos, hit - pos)).append(quoted);
    pos = hit + kSchemaPlaceholder.size();
  }
  out.append(sql.substr(pos));
  return out;
}

std::string jobs_channel(std::string_view schema) { return std::string(schema) + ".jobs"; }

std::string schema_version_mismatch(std::string_view schema, int version, int needed, std::string_view needed_by) {
  const std::string at = "schema \"" + std::string(schema) + "\" is at version " + std::to_string(version) + ", ";
  if (version > needed) {
    return at + "newer than " + std::string(needed_by) + " knows (" + std::to_string(needed) + "): upgrade oncely";
  }
  return at + std::string(needed_by) + " needs " + std::to_string(needed) + ": run `oncely migrate`";
}

}  // namespace detail
}  // namespace oncely
