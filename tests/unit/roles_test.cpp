#include <doctest/doctest.h>

#include <string>

#include "api/roles.hpp"
#include "oncely/admin.hpp"
#include "oncely/errors.hpp"

TEST_CASE("roles: the names are the schema's, within PostgreSQL's 63 bytes") {
  const oncely::SchemaRoles roles = oncely::schema_roles("billing");
  CHECK(roles.producer == "billing_producer");
  CHECK(roles.worker == "billing_worker");
  CHECK(roles.operator_ == "billing_operator");
  CHECK(roles.viewer == "billing_viewer");
  CHECK(oncely::schema_roles(std::string(48, 'a')).operator_.size() <= 63);
  CHECK_THROWS_AS(oncely::schema_roles("Bad\"name"), oncely::ConfigError);
}

TEST_CASE("roles: the SQL names one schema and its four roles, with no placeholder left") {
  const std::string sql = oncely::detail::render_roles_sql("billing");
  for (const char* placeholder : {":ONCELY_SCHEMA", ":PRODUCER_", ":WORKER_", ":OPERATOR_", ":VIEWER_"}) {
    CAPTURE(placeholder);
    CHECK(sql.find(placeholder) == std::string::npos);
  }
  CHECK(sql.find("CREATE ROLE \"billing_producer\" NOLOGIN") != std::string::npos);
  CHECK(sql.find("rolname = 'billing_viewer'") != std::string::npos);
  CHECK(sql.find("ON \"billing\".jobs TO \"billing_producer\"") != std::string::npos);
  // Nothing is granted to PUBLIC or outside the schema, and no role gets CREATE (DDL).
  CHECK(sql.find("TO PUBLIC") == std::string::npos);
  CHECK(sql.find("GRANT CREATE") == std::string::npos);
  CHECK(sql.find("GRANT ALL") == std::string::npos);
  CHECK(sql.find("ALTER DEFAULT PRIVILEGES") == std::string::npos);
}
