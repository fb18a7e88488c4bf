#pragma once
// The schema_migrations table: which migrations a schema has had. `oncely migrate` creates
// it and records each version it applies; a worker reads the version at start-up.

#include <set>
#include <string>
#include <string_view>

#include <pqxx/transaction_base>

#include "store/sql.hpp"

namespace oncely::detail {

class SchemaMigrationsTable {
 public:
  explicit SchemaMigrationsTable(StatementSet& statements);

  /// The version recorded in the database; 0 if none (or the table does not exist).
  int version(pqxx::transaction_base& tx) const;
  /// Throws DatabaseError (schema_version_mismatch) unless the schema is at version `needed`,
  /// or newer when `newer_ok`: the check of every command that needs the current schema.
  void require(pqxx::transaction_base& tx, int needed, std::string_view needed_by, bool newer_ok = false) const;

  // ---- for the migrator, which runs on its own connection: unnamed statements ----
  /// Creates the schema and this table if missing.
  void create(pqxx::transaction_base& tx) const;
  std::set<int> applied(pqxx::transaction_base& tx) const;
  void record(pqxx::transaction_base& tx, int version, std::string_view name) const;

 private:
  const StatementSet& statements_;
  const Statement* version_;
  std::string exists_, create_schema_, create_table_, applied_, record_;
};

}  // namespace oncely::detail
