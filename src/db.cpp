#include "db.hpp"

#include <libpq-fe.h>

#include <cstdlib>
#include <set>

#include <pqxx/except>

#include "oncely/errors.hpp"
#include "text.hpp"

namespace oncely::detail {

std::string one_line(const DatabaseUrl& url, const std::string& message) { return fold_lines(url.scrub(message)); }

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

std::unique_ptr<pqxx::connection> connect(const DatabaseUrl& url) {
  try {
    return std::make_unique<pqxx::connection>(with_connection_defaults(url.expose(), [](const char* name) {
      return static_cast<const char*>(std::getenv(name));
    }));
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("cannot connect to " + url.redacted() + ": " + one_line(url, e.what()));
  } catch (const pqxx::failure& e) {
    throw DatabaseError("cannot connect to " + url.redacted() + ": " + one_line(url, e.what()));
  }
}

}  // namespace oncely::detail
