#include <doctest/doctest.h>

#include "api/embedded_migrations.hpp"
#include "oncely/admin.hpp"

TEST_CASE("migrations: embedded in order, numbered from 1 without gaps") {
  const auto& all = oncely::detail::embedded_migrations();
  REQUIRE_FALSE(all.empty());
  for (std::size_t i = 0; i < all.size(); ++i) {
    CAPTURE(all[i].name);
    CHECK(all[i].version == static_cast<int>(i) + 1);
    CHECK_FALSE(all[i].sql.empty());
  }
  CHECK(oncely::latest_schema_version() == all.back().version);
}

TEST_CASE("migrations: every object is created in the placeholder schema") {
  // An unqualified CREATE would land in whatever search_path says (usually public).
  for (const auto& m : oncely::detail::embedded_migrations()) {
    CAPTURE(m.name);
    const std::string sql(m.sql);
    for (const char* create : {"CREATE TABLE ", "CREATE FUNCTION ", "CREATE OR REPLACE FUNCTION ", "CREATE VIEW ",
                               "CREATE SEQUENCE ", "CREATE TYPE "}) {
      for (auto pos = sql.find(create); pos != std::string::npos; pos = sql.find(create, pos + 1)) {
        const std::string rest = sql.substr(pos + std::string(create).size(), 20);
        CHECK_MESSAGE(rest.starts_with(":ONCELY_SCHEMA."), "unqualified: " << create << rest);
      }
    }
  }
}
