#include <doctest/doctest.h>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "support/schema.hpp"

TEST_CASE("schema: plain lower-case identifiers are accepted") {
  for (const char* name : {"oncely", "_jobs", "app_jobs_2", "a"}) {
    CAPTURE(name);
    CHECK_NOTHROW(oncely::validate_schema_name(name));
  }
}

TEST_CASE("schema: anything that would need quoting or is reserved is rejected") {
  for (const char* name : {"", "x; drop table y", "Oncely", "1jobs", "pg_jobs", "with space", "a\"b", "jobs-2",
                           "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghij"}) {
    CAPTURE(name);
    CHECK_THROWS_AS(oncely::validate_schema_name(name), oncely::ConfigError);
  }
}

TEST_CASE("schema: the error names the bad value and why, on one line") {
  try {
    oncely::validate_schema_name("x; drop table y");
    FAIL("expected a ConfigError");
  } catch (const oncely::ConfigError& e) {
    const std::string message = e.what();
    CHECK(message.find("invalid schema name 'x; drop table y'") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("schema: render_sql replaces every placeholder with the quoted name") {
  CHECK(oncely::detail::render_sql("SELECT 1 FROM :ONCELY_SCHEMA.jobs JOIN :ONCELY_SCHEMA.x USING (id)", "app") ==
        "SELECT 1 FROM \"app\".jobs JOIN \"app\".x USING (id)");
  CHECK(oncely::detail::render_sql("SELECT '{}'::jsonb", "app") == "SELECT '{}'::jsonb");
  CHECK_THROWS_AS(oncely::detail::render_sql(":ONCELY_SCHEMA.jobs", "Bad"), oncely::ConfigError);
}
