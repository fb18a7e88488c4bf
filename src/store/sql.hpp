#pragma once
// What every table's statements share: the set of statements rendered for one schema (and
// prepared on each connection when prepared statements are on), and the conversions
// between C++ values and SQL parameters and fields that libpqxx 6.4 lacks.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <pqxx/connection>
#include <pqxx/field>
#include <pqxx/result>
#include <pqxx/transaction_base>

namespace oncely::detail {

/// One statement of a table, rendered for the schema.
struct Statement {
  std::string name;  // its prepared-statement name, "oncely_<name>"
  std::string sql;
};

/// Every runtime statement of one schema, in one place so that a connection can prepare
/// them all at once. Statements keep their addresses (tables hold pointers to theirs).
class StatementSet {
 public:
  /// `prepared`: run statements as named prepared statements (prepare() once per
  /// connection). Off for transaction-mode poolers that cannot carry them.
  StatementSet(std::string_view schema, bool prepared);
  StatementSet(const StatementSet&) = delete;
  StatementSet& operator=(const StatementSet&) = delete;

  [[nodiscard]] const std::string& schema() const noexcept { return schema_; }
  /// Renders `sql` for the schema and adds it under `name`.
  const Statement& add(std::string_view name, std::string_view sql);
  /// Prepares every statement on `conn` (a no-op when prepared statements are off).
  void prepare(pqxx::connection& conn) const;

  template <typename... Args>
  pqxx::result run(pqxx::transaction_base& tx, const Statement& s, Args&&... args) const {
    if (prepared_) return tx.exec_prepared(s.name, std::forward<Args>(args)...);
    return tx.exec_params(s.sql, std::forward<Args>(args)...);
  }

 private:
  std::string schema_;
  bool prepared_;
  std::deque<Statement> all_;
};

/// libpqxx 6.4 cannot read a field into std::optional; this can.
template <typename T>
std::optional<T> nullable(const pqxx::field& f) {
  return f.is_null() ? std::nullopt : std::optional<T>(f.as<T>());
}

/// A json/jsonb field as JSON (null for SQL NULL).
nlohmann::json json_or_null(const pqxx::field& f);

/// Postgres array literals for parameters ("{1,2,3}", "{\"a\",\"b\"}").
std::string to_array_literal(const std::vector<std::int64_t>& values);
std::string to_array_literal(const std::vector<std::string>& values);
std::string to_array_literal(const std::vector<int>& values);
/// The same with NULL elements.
std::string to_array_literal(const std::vector<std::optional<std::string>>& values);

/// The one form timestamps take in the API: ISO 8601 in UTC with microseconds
/// ("2026-12-01T12:00:00.000000Z"). Statements write `to_char(<column> AT TIME ZONE 'UTC',
/// :ISO_UTC)`; render_statement() puts the format in.
inline constexpr std::string_view kIsoUtcPlaceholder = ":ISO_UTC";

/// Maintenance's pruning of `table` (a name in the schema): up to $2 rows whose `column` is
/// older than $1 milliseconds, by ctid, in one statement a batch.
std::string prune_older_sql(std::string_view table, std::string_view column);

/// `sql` for `schema`: :ONCELY_SCHEMA quoted (render_sql) and :ISO_UTC filled in.
std::string render_statement(std::string_view sql, std::string_view schema);

}  // namespace oncely::detail
