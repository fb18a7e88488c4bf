#include "store/schema_migrations.hpp"

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "support/schema.hpp"

namespace oncely::detail {
namespace {

constexpr std::string_view kSchemaVersion = R"sql(
  SELECT coalesce(max(version), 0) FROM :ONCELY_SCHEMA.schema_migrations
)sql";

constexpr std::string_view kTableExists = "SELECT to_regclass(':ONCELY_SCHEMA.schema_migrations') IS NOT NULL";
constexpr std::string_view kCreateSchema = "CREATE SCHEMA IF NOT EXISTS :ONCELY_SCHEMA";
constexpr std::string_view kCreateMigrationsTable = R"sql(
  CREATE TABLE IF NOT EXISTS :ONCELY_SCHEMA.schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    breaking   boolean     NOT NULL DEFAULT false,  -- never set; kept for the schemas that have it
    applied_at timestamptz NOT NULL DEFAULT now()
  )
)sql";
constexpr std::string_view kAppliedVersions = "SELECT version FROM :ONCELY_SCHEMA.schema_migrations";
constexpr std::string_view kRecordVersion =
    "INSERT INTO :ONCELY_SCHEMA.schema_migrations (version, name) VALUES ($1, $2)";

}  // namespace

SchemaMigrationsTable::SchemaMigrationsTable(StatementSet& statements)
    : statements_(statements),
      version_(&statements.add("schema_version", kSchemaVersion)),
      exists_(render_statement(kTableExists, statements.schema())),
      create_schema_(render_statement(kCreateSchema, statements.schema())),
      create_table_(render_statement(kCreateMigrationsTable, statements.schema())),
      applied_(render_statement(kAppliedVersions, statements.schema())),
      record_(render_statement(kRecordVersion, statements.schema())) {}

int SchemaMigrationsTable::version(pqxx::transaction_base& tx) const {
  if (!tx.exec(exists_)[0][0].as<bool>()) return 0;
  return statements_.run(tx, *version_).at(0).at(0).as<int>();
}

void SchemaMigrationsTable::require(pqxx::transaction_base& tx, int needed, std::string_view needed_by,
                                    bool newer_ok) const {
  const int current = version(tx);
  if (current < needed || (current > needed && !newer_ok)) {
    throw DatabaseError(schema_version_mismatch(statements_.schema(), current, needed, needed_by));
  }
}

void SchemaMigrationsTable::create(pqxx::transaction_base& tx) const {
  tx.exec(create_schema_);
  tx.exec(create_table_);
}

std::set<int> SchemaMigrationsTable::applied(pqxx::transaction_base& tx) const {
  std::set<int> versions;
  for (const auto& row : tx.exec(applied_)) versions.insert(row[0].as<int>());
  return versions;
}

void SchemaMigrationsTable::record(pqxx::transaction_base& tx, int version, std::string_view name) const {
  tx.exec_params(record_, version, std::string(name));
}

}  // namespace oncely::detail
