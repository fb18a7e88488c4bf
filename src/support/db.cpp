#include "support/db.hpp"

#include <libpq-fe.h>

#include <cstdlib>
#include <set>

#include <pqxx/except>

#include <optional>

#include <pqxx/pqxx>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "support/pooler.hpp"
#include "support/schema.hpp"
#include "support/text.hpp"

namespace oncely::detail {

std::string one_line(const DatabaseUrl& url, const std::string& message) {
  return with_pooler_hint(fold_lines(url.scrub(message)));
}

std::string with_connection_defaults(const std::string& conninfo,
                                     const std::function<const char*(const char*)>& getenv) {
  // libpq's own parser says which keys the string sets, in either form (a URL's query too).
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  if (options == nullptr) {
    PQfreemem(error);
    return conninfo;
  }
  std::set<std::string, std::less<>> set_by_user;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val != nullptr) set_by_user.emplace(o->keyword);
  }
  PQconninfoFree(options);

  const bool url = conninfo.starts_with("postgresql://") || conninfo.starts_with("postgres://");
  std::string out = conninfo;
  for (const ConnectionDefault& d : kConnectionDefaults) {
    if (set_by_user.contains(d.key)) continue;
    if (!d.environment.empty()) {
      const char* value = getenv(std::string(d.environment).c_str());
      if (value != nullptr && *value != '\0') continue;
    }
    if (!url) {
      if (!out.empty()) out += ' ';
    } else if (out.find('?') == std::string::npos) {
      out += '?';
    } else if (out.back() != '?' && out.back() != '&') {
      out += '&';
    }
    out.append(d.key).append("=").append(d.value);
  }
  return out;
}

DatabaseUrl with_session_setting(const DatabaseUrl& url, std::string_view name, std::string_view value) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.expose().c_str(), &error);
  if (options == nullptr) {
    PQfreemem(error);
    return url;
  }
  // key='value', with \ and ' escaped as libpq reads them.
  const auto quoted = [](std::string_view v) {
    std::string out = "'";
    for (const char c : v) {
      if (c == '\\' || c == '\'') out += '\\';
      out += c;
    }
    return out + "'";
  };
  std::string out;
  std::string extra = "-c " + std::string(name) + "=" + std::string(value);
  bool had_options = false;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    std::string v = o->val;
    if (std::string_view(o->keyword) == "options") {
      v += " " + extra;
      had_options = true;
    }
    if (!out.empty()) out += ' ';
    out.append(o->keyword).append("=").append(quoted(v));
  }
  PQconninfoFree(options);
  if (!had_options) out.append(out.empty() ? "" : " ").append("options=").append(quoted(extra));
  return DatabaseUrl(out);
}

std::unique_ptr<pqxx::connection> connect(const DatabaseUrl& url) {
  // A string libpq cannot read is the user's to fix (exit 2), not a database that cannot
  // be reached (exit 1): it is parsed here first, as libpq will parse it.
  char* error = nullptr;
  if (PQconninfoOption* options = PQconninfoParse(url.expose().c_str(), &error)) {
    PQconninfoFree(options);
  } else {
    const std::string why = error != nullptr ? one_line(url, error) : "out of memory";
    PQfreemem(error);
    throw ConfigError("", "cannot read the database URL " + printable(url.redacted()) + ": " + why);
  }
  try {
    return std::make_unique<pqxx::connection>(with_connection_defaults(
        url.expose(), [](const char* name) { return static_cast<const char*>(std::getenv(name)); }));
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("cannot connect to " + url.redacted() + ": " + one_line(url, e.what()));
  } catch (const pqxx::failure& e) {
    throw DatabaseError("cannot connect to " + url.redacted() + ": " + one_line(url, e.what()));
  }
}

namespace {

// A schema is oncely's when it holds both of these tables.
constexpr std::string_view kOncelySchemas = R"sql(
  SELECT coalesce(string_agg(n.nspname, ', ' ORDER BY n.nspname), '')
    FROM pg_namespace n
   WHERE EXISTS (SELECT FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'schema_migrations')
     AND EXISTS (SELECT FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'processed_jobs')
)sql";

// What is missing: 42P01 undefined table, 42703 undefined column (an older version),
// 42883 undefined function, 3F000 invalid schema name.
bool says_something_is_missing(std::string_view sqlstate) {
  return sqlstate == "42P01" || sqlstate == "42703" || sqlstate == "42883" || sqlstate == "3F000";
}

std::optional<std::string> explain_schema(const DatabaseUrl& url, std::string_view schema) {
  auto conn = connect(url);
  pqxx::nontransaction tx{*conn};
  const std::string quoted = quote_identifier(schema);
  const bool migrated =
      tx.exec_params1("SELECT to_regclass($1) IS NOT NULL", quoted + ".schema_migrations")[0].as<bool>();
  const int version =
      migrated ? tx.exec("SELECT coalesce(max(version), 0) FROM " + quoted + ".schema_migrations")[0][0].as<int>() : 0;
  if (version >= latest_schema_version()) return std::nullopt;  // it is not the schema's fault
  const std::string others = tx.exec(std::string(kOncelySchemas))[0][0].as<std::string>();
  const std::string known =
      others.empty() ? "no oncely schema in this database" : "oncely schemas in this database: " + others;
  if (!migrated) {
    return "schema \"" + printable(schema) + "\" is not migrated (" + known + "); run oncely migrate";
  }
  return schema_version_mismatch(printable(schema), version, latest_schema_version(), "this oncely");
}

}  // namespace

DatabaseError schema_error(const DatabaseUrl& url, std::string_view schema, std::string_view what,
                           const pqxx::sql_error& e) noexcept {
  try {
    if (says_something_is_missing(e.sqlstate())) {
      if (auto explained = explain_schema(url, schema)) return DatabaseError(*explained);
    }
  } catch (...) {
    // The explanation is a courtesy: without it, the server's own message follows.
  }
  return DatabaseError(std::string(what) + ": " + one_line(url, e.what()));
}

}  // namespace oncely::detail
