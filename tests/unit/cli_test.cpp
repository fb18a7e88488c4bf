#include <doctest/doctest.h>

#include <cstdlib>
#include <sstream>

#include "cli/app.hpp"
#include "support/parsed_cli.hpp"

using Parsed = oncely::test::ParsedCli;

TEST_CASE("cli: enqueue binds its arguments and options") {
  unsetenv("DATABASE_URL");
  unsetenv("ONCELY_SCHEMA");
  Parsed p({"enqueue", "send_email", R"({"to":"a@b"})", "--queue", "mail", "--key", "k-1", "--priority", "-3",
            "--max-attempts", "4", "--run-at", "+5m", "--database-url", "postgresql://x@h/db"});
  REQUIRE_FALSE(p.exit);
  CHECK(p.cli->enqueue.kind == "send_email");
  CHECK(p.cli->enqueue.payload == R"({"to":"a@b"})");
  CHECK(p.cli->enqueue.queue == "mail");
  CHECK(p.cli->enqueue.key == "k-1");
  CHECK(p.cli->enqueue.priority == -3);
  CHECK(p.cli->enqueue.max_attempts == 4);
  CHECK(p.cli->enqueue.run_at == "+5m");
  CHECK(p.cli->globals.database_url == "postgresql://x@h/db");
  CHECK(p.cli->globals.schema == "oncely");
}

TEST_CASE("cli: usage errors print one line and exit 2") {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {}, {"enqueue"}, {"migrate", "--bogus"}, {"nosuchcommand"}, {"enqueue", "k", "--priority", "high"}}) {
    Parsed p(args);
    REQUIRE(p.exit);
    CHECK(*p.exit == oncely::cli::kExitUsage);
    const std::string err = p.err.str();
    CHECK(err.starts_with("oncely: error: "));
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
}

TEST_CASE("cli: --help succeeds and lists the commands") {
  Parsed p({"--help"});
  REQUIRE(p.exit);
  CHECK(*p.exit == 0);
  CHECK(p.out.str().find("migrate") != std::string::npos);
  CHECK(p.out.str().find("enqueue") != std::string::npos);
}

TEST_CASE("cli: without a database the command refuses with exit 2") {
  unsetenv("DATABASE_URL");
  Parsed p({"migrate"});
  REQUIRE_FALSE(p.exit);
  const int code = oncely::cli::dispatch(*p.cli, {p.out, p.err});
  CHECK(code == oncely::cli::kExitUsage);
  CHECK(p.err.str() == "oncely: error: no database given: set DATABASE_URL or pass --database-url\n");
}

TEST_CASE("cli: a bad schema name is refused before connecting") {
  Parsed p({"migrate", "--schema", "x; drop table y", "--database-url", "postgresql://nobody@127.0.0.1:1/none"});
  REQUIRE_FALSE(p.exit);
  const int code = oncely::cli::dispatch(*p.cli, {p.out, p.err});
  CHECK(code == oncely::cli::kExitUsage);
  CHECK(p.err.str().find("invalid schema name 'x; drop table y'") != std::string::npos);
}

TEST_CASE("cli: the schema comes from ONCELY_SCHEMA when not given") {
  setenv("ONCELY_SCHEMA", "from_env", 1);
  Parsed p({"migrate"});
  unsetenv("ONCELY_SCHEMA");
  REQUIRE_FALSE(p.exit);
  CHECK(p.cli->globals.schema == "from_env");
}

TEST_CASE("cli: check's usage errors exit 3 (UNKNOWN), not 2 (CRITICAL)") {
  Parsed bad_flag({"check", "--dead-letters-critical", "many"});
  REQUIRE(bad_flag.exit);
  CHECK(*bad_flag.exit == 3);
  Parsed bad_duration({"check", "--max-age-warning", "5 sex", "--database-url", "postgresql://x@127.0.0.1:1/db"});
  REQUIRE_FALSE(bad_duration.exit);
  CHECK(oncely::cli::dispatch(*bad_duration.cli, {bad_duration.out, bad_duration.err}) == 3);
  CHECK(bad_duration.err.str().find("--max-age-warning") != std::string::npos);
}
