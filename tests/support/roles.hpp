#pragma once
// Login roles granted the group roles of `oncely migrate --roles`, as a deployment makes
// them: for the privilege tests (tests/pg/roles_pgtest.cpp) and the console's.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include "oncely/admin.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"

namespace oncely::test {

/// The test database's URL (or key=value string) with another user and password: later
/// key=value settings win, and a URL's user info is replaced.
inline std::string url_as(const std::string& user, const std::string& password) {
  const std::string& url = test_database_url();
  const std::size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url + " user=" + user + " password=" + password;
  const std::size_t host = scheme + 3;
  const std::size_t path = url.find_first_of("/?", host);
  const std::size_t at = url.rfind('@', path == std::string::npos ? std::string::npos : path);
  const std::size_t rest = (at != std::string::npos && at >= host) ? at + 1 : host;
  return url.substr(0, host) + user + ":" + password + "@" + url.substr(rest);
}

/// The schema's four group roles (made by `oncely migrate --roles`), one LOGIN role granted
/// each, and their URLs. Dropped again at the end: roles are shared by the whole cluster.
struct Roles {
  PgFixture& db;
  oncely::SchemaRoles group;
  std::map<std::string, std::string> login;  // "producer" -> login role name
  std::map<std::string, std::string> url;    // "producer" -> URL as that login role
  ProcessResult migrated;

  explicit Roles(PgFixture& fixture) : db(fixture), group(oncely::schema_roles(fixture.schema)) {
    migrated = run_process(oncely_cli({"migrate", "--roles"}),
                           EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    for (const auto& [what, name] : groups()) {
      const std::string role = db.schema + "_login_" + what;
      db.exec("CREATE ROLE " + quoted(role) + " LOGIN PASSWORD 'pw-" + what + "'");
      if (migrated.exit_code == 0) db.exec("GRANT " + quoted(name) + " TO " + quoted(role));
      login[what] = role;
      url[what] = url_as(role, "pw-" + what);
    }
  }
  ~Roles() {
    try {
      pqxx::connection conn(db.url);
      pqxx::nontransaction tx{conn};
      tx.exec("SET client_min_messages = warning");
      std::string all;
      for (const auto& [what, name] : groups())
        all += (all.empty() ? "" : ", ") + quoted(name) + ", " + quoted(login[what]);
      tx.exec("DROP OWNED BY " + all + " CASCADE");
      for (const auto& [what, name] : groups()) {
        tx.exec("DROP ROLE IF EXISTS " + quoted(login[what]));
        tx.exec("DROP ROLE IF EXISTS " + quoted(name));
      }
    } catch (const std::exception& e) {
      MESSAGE("could not drop the test roles: " << e.what());
    }
  }
  Roles(const Roles&) = delete;
  Roles& operator=(const Roles&) = delete;

  [[nodiscard]] std::vector<std::pair<std::string, std::string>> groups() const {
    return {{"producer", group.producer},
            {"worker", group.worker},
            {"operator", group.operator_},
            {"viewer", group.viewer}};
  }
  static std::string quoted(const std::string& name) { return "\"" + name + "\""; }

  /// `oncely ARGS` as the login role granted `what`.
  ProcessResult cli(const std::string& what, const std::vector<std::string>& args,
                    const std::string& input = "") const {
    return run_process(oncely_cli(args), EnvChanges{{"DATABASE_URL", url.at(what)}, {"ONCELY_SCHEMA", db.schema}},
                       input);
  }
};

}  // namespace oncely::test
