#pragma once
// The least-privilege group roles of a schema (migrations/roles/roles.sql): rendering the
// SQL for one schema, and applying it inside the migrator's transaction.

#include <string>
#include <string_view>
#include <vector>

#include <pqxx/transaction_base>

namespace oncely::detail {

/// migrations/roles/roles.sql, embedded at build time (cmake/EmbedSqlFile.cmake).
std::string_view roles_sql();

/// First key of the two-key advisory lock that `oncely migrate` and `migrate --roles` take
/// ("once"); the second is hashtext(schema), so that different schemas do not wait.
inline constexpr int kMigrateLockClass = 0x6F6E6365;

/// roles.sql for `schema`: the schema quoted, each role's name quoted (:PRODUCER_ROLE) and
/// bare inside a literal (:PRODUCER_NAME; the names are plain identifiers, validated).
std::string render_roles_sql(std::string_view schema);

/// Whether all four roles of `schema` exist (then a migration re-applies their grants).
bool schema_roles_exist(pqxx::transaction_base& tx, std::string_view schema);

/// Throws DatabaseError (one line) unless the current role can do what roles.sql does:
/// create the roles that are missing (CREATEROLE or superuser) and grant on the schema's
/// tables (their owner, or a member of it, or a superuser): a GRANT by anyone else only
/// warns, and would leave the roles without their privileges.
void check_can_apply_roles(pqxx::transaction_base& tx, std::string_view schema);

/// Runs roles.sql for `schema` in `tx`; returns the roles it created.
std::vector<std::string> apply_roles(pqxx::transaction_base& tx, std::string_view schema);

}  // namespace oncely::detail
