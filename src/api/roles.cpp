// `oncely migrate --roles`: the four group roles of a schema and exactly their privileges.

#include "api/roles.hpp"

#include <pqxx/pqxx>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "store/store.hpp"
#include "support/db.hpp"
#include "support/schema.hpp"
#include "support/text.hpp"

namespace oncely {
namespace detail {
namespace {

// Roles of the four names that do not exist yet, in the order given.
constexpr std::string_view kMissingRoles = R"sql(
  SELECT r.name FROM unnest($1::text[]) WITH ORDINALITY AS r(name, n)
   WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles p WHERE p.rolname = r.name)
   ORDER BY r.n
)sql";

// Whether the current role may create roles, and the first table or sequence of the schema
// whose owner it cannot act for (GRANT by a non-owner only warns "no privileges were granted").
constexpr std::string_view kGrantAbility = R"sql(
  SELECT r.rolsuper OR r.rolcreaterole,
         (SELECT c.relname || ' (owned by ' || pg_catalog.pg_get_userbyid(c.relowner) || ')'
            FROM pg_catalog.pg_class c
           WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'S', 'p')
             AND NOT r.rolsuper AND NOT pg_catalog.pg_has_role(c.relowner, 'USAGE')
           ORDER BY c.relname LIMIT 1)
    FROM pg_catalog.pg_roles r
   WHERE r.rolname = current_user
)sql";

std::vector<std::string> role_list(const SchemaRoles& roles) {
  return {roles.producer, roles.worker, roles.operator_, roles.viewer};
}

std::vector<std::string> missing_roles(pqxx::transaction_base& tx, std::string_view schema) {
  std::vector<std::string> missing;
  for (const auto& row :
       tx.exec_params(std::string(kMissingRoles), to_array_literal(role_list(schema_roles(schema))))) {
    missing.push_back(row[0].as<std::string>());
  }
  return missing;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

std::string render_roles_sql(std::string_view schema) {
  const SchemaRoles roles = schema_roles(schema);
  std::string text(roles_sql());
  const std::pair<std::string_view, const std::string*> placeholders[] = {{"PRODUCER", &roles.producer},
                                                                          {"WORKER", &roles.worker},
                                                                          {"OPERATOR", &roles.operator_},
                                                                          {"VIEWER", &roles.viewer}};
  for (const auto& [what, name] : placeholders) {
    replace_all(text, ":" + std::string(what) + "_ROLE", quote_identifier(*name));
    replace_all(text, ":" + std::string(what) + "_NAME", *name);
  }
  return render_sql(text, schema);
}

bool schema_roles_exist(pqxx::transaction_base& tx, std::string_view schema) {
  return missing_roles(tx, schema).empty();
}

void check_can_apply_roles(pqxx::transaction_base& tx, std::string_view schema) {
  const pqxx::row ability = tx.exec_params1(std::string(kGrantAbility), quote_identifier(schema));
  const std::vector<std::string> missing = missing_roles(tx, schema);
  if (!missing.empty() && !ability[0].as<bool>()) {
    throw DatabaseError(
        "creating roles needs CREATEROLE: the current role has neither CREATEROLE nor SUPERUSER; run "
        "`oncely migrate --roles` as one that has, or have a DBA create " +
        joined(missing) + " (CREATE ROLE ... NOLOGIN) first");
  }
  if (!ability[1].is_null()) {
    throw DatabaseError("granting privileges on schema \"" + std::string(schema) +
                        "\" needs its owner: the current role " + "cannot grant on " + ability[1].as<std::string>() +
                        "; run `oncely migrate --roles` as that role");
  }
}

std::vector<std::string> apply_roles(pqxx::transaction_base& tx, std::string_view schema) {
  check_can_apply_roles(tx, schema);
  std::vector<std::string> created = missing_roles(tx, schema);
  tx.exec(render_roles_sql(schema));
  return created;
}

}  // namespace detail

SchemaRoles schema_roles(std::string_view schema) {
  validate_schema_name(schema);
  const std::string prefix(schema);
  return SchemaRoles{prefix + "_producer", prefix + "_worker", prefix + "_operator", prefix + "_viewer"};
}

RolesResult migrate_roles(const DatabaseUrl& url, std::string_view schema) {
  const detail::Store store(schema);  // validates the schema name before connecting
  auto conn = detail::connect(url);
  RolesResult result;
  try {
    pqxx::work tx{*conn, "oncely_migrate_roles"};
    tx.exec_params("SELECT pg_advisory_xact_lock($1, hashtext($2))", detail::kMigrateLockClass, std::string(schema));
    store.schema_migrations.require(tx, latest_schema_version(), "this oncely", true);
    result.created = detail::apply_roles(tx, schema);
    tx.commit();
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("lost the connection to " + url.redacted() +
                        " while creating roles: " + detail::one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(url, schema, "creating the roles of schema \"" + std::string(schema) + "\" failed", e);
  }
  return result;
}

}  // namespace oncely
