#include <doctest/doctest.h>

#include <regex>

#include "support/parsed_cli.hpp"

// The packaging check (tests/install_consumer.sh) and users ask the installed binary which
// version it is; without a subcommand, like --help.
TEST_CASE("cli: --version prints the project's version and exits 0") {
  oncely::test::ParsedCli p({"--version"});
  REQUIRE(p.exit);
  CHECK(*p.exit == 0);
  CHECK(p.out.str() == std::string("oncely ") + ONCELY_VERSION + "\n");
  CHECK(std::regex_match(std::string(ONCELY_VERSION), std::regex(R"(\d+\.\d+\.\d+)")));
  CHECK(p.err.str().empty());
}
