#include "pg_fixture.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "oncely/admin.hpp"

namespace oncely::test {

const std::string& test_database_url() {
  static const std::string url = [] {
    const char* value = std::getenv("ONCELY_TEST_DATABASE_URL");
    return std::string(value ? value : "");
  }();
  return url;
}

std::string unique_schema_name() {
  static std::atomic<int> counter{0};
  return "oncely_t_" + std::to_string(getpid()) + "_" + std::to_string(++counter);
}

PgFixture::PgFixture() : url(test_database_url()), schema(unique_schema_name()) {
  oncely::migrate(DatabaseUrl(url), schema);
  conn = std::make_unique<pqxx::connection>(url);
}

PgFixture::~PgFixture() {
  try {
    if (!conn || !conn->is_open()) conn = std::make_unique<pqxx::connection>(url);
    pqxx::nontransaction tx{*conn};
    tx.exec("SET client_min_messages = warning");
    tx.exec("DROP SCHEMA IF EXISTS " + tx.quote_name(schema) + " CASCADE");
  } catch (const std::exception& e) {
    std::cerr << "PgFixture: could not drop schema " << schema << ": " << e.what() << "\n";
  }
}

std::string PgFixture::table(const std::string& name) const { return "\"" + schema + "\"." + name; }

pqxx::result PgFixture::exec(const std::string& sql) {
  // Some tests restart the server: a connection that died is replaced, once per call.
  for (int attempt = 0;; ++attempt) {
    try {
      if (!conn->is_open()) conn = std::make_unique<pqxx::connection>(url);
      pqxx::work tx{*conn};
      pqxx::result r = tx.exec(sql);
      tx.commit();
      return r;
    } catch (const pqxx::broken_connection&) {
      if (attempt > 0) throw;
      conn = std::make_unique<pqxx::connection>(url);
    }
  }
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string sqlstate_of(pqxx::connection& conn, const std::string& sql) {
  try {
    pqxx::work tx(conn);
    tx.exec(sql);
    tx.commit();
    return "";
  } catch (const pqxx::sql_error& e) {
    return e.sqlstate();
  }
}

}  // namespace oncely::test
