#pragma once
// PgFixture: a freshly migrated schema of its own for each test, dropped afterwards.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <pqxx/pqxx>

namespace oncely::test {

/// ONCELY_TEST_DATABASE_URL; the pg test binary exits 77 (skipped) or fails without it.
const std::string& test_database_url();

/// A unique schema name for this process: oncely_t_<pid>_<n>.
std::string unique_schema_name();

struct PgFixture {
  PgFixture();   // creates and migrates `schema` with the real migrator
  ~PgFixture();  // DROP SCHEMA ... CASCADE; logs, never throws
  PgFixture(const PgFixture&) = delete;
  PgFixture& operator=(const PgFixture&) = delete;

  std::string url;
  std::string schema;
  std::unique_ptr<pqxx::connection> conn;

  /// "<quoted schema>.<name>", for SQL written in tests.
  [[nodiscard]] std::string table(const std::string& name) const;
  /// Runs one statement in its own transaction and returns the result.
  pqxx::result exec(const std::string& sql);
  /// The single value of a one-row, one-column query.
  template <typename T>
  T scalar(const std::string& sql) {
    return exec(sql).at(0).at(0).as<T>();
  }
};

/// The SQLSTATE `sql` fails with in a transaction of its own on `conn` ("" when it succeeds).
std::string sqlstate_of(pqxx::connection& conn, const std::string& sql);

/// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

}  // namespace oncely::test
