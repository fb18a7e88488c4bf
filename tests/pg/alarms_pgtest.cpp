// `oncely check --config FILE` judges each queue by its own alarms, with the defaults for
// the rest, and threshold options override the file: exit codes and findings against a
// real database.
#include <doctest/doctest.h>

#include <string>

#include "support/parsed_cli.hpp"
#include "support/pg_fixture.hpp"
#include "support/temp_dir.hpp"

using namespace oncely::test;

namespace {

void add_dead_letters(PgFixture& db, const std::string& queue, int n) {
  db.exec("INSERT INTO " + db.table("dead_letters") +
          " (job_id, queue, kind, payload, priority, attempts, error_class, created_at)"
          " SELECT g, '" +
          queue + "', 'k', '{}', 0, 1, 'permanent', now() FROM generate_series(1, " + std::to_string(n) + ") AS g");
}

struct Check {
  int exit;
  std::string out;
};

Check run_check(const PgFixture& db, std::vector<const char*> extra) {
  std::vector<const char*> args{"--database-url", db.url.c_str(), "--schema", db.schema.c_str(), "check"};
  args.insert(args.end(), extra.begin(), extra.end());
  ParsedCli cli(args);
  REQUIRE_FALSE(cli.exit);
  const int code = cli.dispatch();
  return {code, cli.out.str() + cli.err.str()};
}

constexpr const char* kConfig = R"({"queues": {
  "strict": {"alarms": {"dead_letters_warning": 0, "dead_letters_critical": 2}},
  "lenient": {"alarms": {"dead_letters_warning": 50, "dead_letters_critical": 100}}
}})";

}  // namespace

TEST_CASE("check --config: each queue by its own alarms; a queue the file does not name by the defaults") {
  PgFixture db;
  add_dead_letters(db, "strict", 3);
  add_dead_letters(db, "lenient", 3);
  add_dead_letters(db, "unnamed", 6);  // over the default warning of 5, under the critical 10
  TempDir dir;
  const std::string config = dir.write("worker.json", kConfig, 0644);

  const Check got = run_check(db, {"--config", config.c_str()});
  INFO(got.out);
  CHECK(got.exit == 2);
  CHECK(got.out.find("CRITICAL: queue strict has 3 dead letters (> 2)") != std::string::npos);
  CHECK(got.out.find("WARNING: queue unnamed has 6 dead letters (> 5)") != std::string::npos);
  CHECK(got.out.find("lenient") == std::string::npos);

  // Without the file: the command's own defaults (critical above 10, no warning).
  const Check plain = run_check(db, {});
  INFO(plain.out);
  CHECK(plain.exit == 0);
}

TEST_CASE("check --config: a threshold option overrides every queue's alarm") {
  PgFixture db;
  add_dead_letters(db, "strict", 3);
  add_dead_letters(db, "lenient", 3);
  TempDir dir;
  const std::string config = dir.write("worker.json", kConfig, 0644);
  const Check got =
      run_check(db, {"--config", config.c_str(), "--dead-letters-critical", "1000", "--dead-letters-warning", "2"});
  INFO(got.out);
  CHECK(got.exit == 1);
  CHECK(got.out.find("WARNING: queue strict has 3 dead letters (> 2)") != std::string::npos);
  CHECK(got.out.find("WARNING: queue lenient has 3 dead letters (> 2)") != std::string::npos);
}

TEST_CASE("check --config: a bad file is UNKNOWN (3), named, before any finding") {
  PgFixture db;
  add_dead_letters(db, "strict", 3);
  TempDir dir;
  const std::string config = dir.write(
      "worker.json", R"({"queues": {"strict": {"alarms": {"dead_letters_warning": 20, "dead_letters_critical": 2}}}})",
      0644);
  const Check got = run_check(db, {"--config", config.c_str()});
  CHECK(got.exit == 3);
  CHECK(got.out.find("/queues/strict/alarms/dead_letters_warning: must not be above dead_letters_critical") !=
        std::string::npos);
}
