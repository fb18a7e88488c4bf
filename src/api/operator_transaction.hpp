#pragma once
// The operator's operations (queues, jobs): each runs in a transaction of its own on a new
// connection, with database failures turned into one-line, password-free DatabaseErrors.

#include <string>
#include <string_view>

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "store/store.hpp"
#include "support/db.hpp"

namespace oncely::detail {

/// Runs `fn(tx, store)` in a READ COMMITTED transaction; commits when `write`.
template <typename Fn>
auto operator_transaction(const DatabaseUrl& url, std::string_view schema, std::string_view what, bool write, Fn&& fn) {
  const Store store(schema);  // validates the schema name before connecting
  auto conn = connect(url);
  try {
    pqxx::work tx{*conn};
    auto result = fn(tx, store);
    if (write) tx.commit();
    return result;
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError(std::string(what) + " failed, connection lost: " + one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw schema_error(url, schema, std::string(what) + " failed", e);
  } catch (const pqxx::in_doubt_error& e) {
    throw DatabaseError(std::string(what) +
                        " may or may not have committed (connection lost during COMMIT): " + one_line(url, e.what()));
  }
}

}  // namespace oncely::detail
