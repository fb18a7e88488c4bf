// Entry point of the database tests. Without ONCELY_TEST_DATABASE_URL they exit 77, which
// ctest reports as skipped; with ONCELY_REQUIRE_PG=1 (CI) a missing database is a failure.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>

#include "support/pg_fixture.hpp"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--list") || arg.starts_with("-l") || arg == "--help" || arg == "-h") listing = true;
  }
  if (!listing && oncely::test::test_database_url().empty()) {
    const char* required = std::getenv("ONCELY_REQUIRE_PG");
    if (required && std::strcmp(required, "1") == 0) {
      std::cerr << "ONCELY_TEST_DATABASE_URL is not set but ONCELY_REQUIRE_PG=1: failing\n";
      return 1;
    }
    std::cerr << "ONCELY_TEST_DATABASE_URL is not set: skipping the database tests\n";
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
