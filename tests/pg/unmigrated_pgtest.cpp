// Commands against a mistyped or unmigrated schema say so in one line, instead of the
// server's "relation ... does not exist" with its SQL excerpt.
#include <doctest/doctest.h>

#include <algorithm>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"

using namespace oncely::test;

TEST_SUITE("unmigrated") {
  TEST_CASE("unmigrated: stats, check, dlq and enqueue name the schema, the oncely schemas there, and the fix") {
    PgFixture db;  // a migrated schema, which the message lists
    struct Row {
      std::vector<std::string> args;
      int exit_code;
      std::string stream;  // where the line goes
    };
    const std::vector<Row> rows = {
        {{"stats"}, 1, "err"},
        {{"dlq", "list"}, 1, "err"},
        {{"dlq", "replay", "--all"}, 1, "err"},
        {{"dlq", "purge", "--all"}, 1, "err"},
        {{"enqueue", "send_receipt", "{}"}, 1, "err"},
        {{"check"}, 3, "out"},  // UNKNOWN: it cannot tell
    };
    for (const Row& row : rows) {
      std::vector<std::string> args = row.args;
      args.insert(args.end(), {"--schema", "oncely_typo"});
      CAPTURE(args.front());
      const ProcessResult r = run_process(oncely_cli(args), EnvChanges{{"DATABASE_URL", db.url}});
      CAPTURE(r.out);
      CAPTURE(r.err);
      CHECK(r.exit_code == row.exit_code);
      const std::string& line = row.stream == "err" ? r.err : r.out;
      CHECK(std::count(line.begin(), line.end(), '\n') == 1);
      CHECK(line.find("schema \"oncely_typo\" is not migrated (oncely schemas in this database: ") !=
            std::string::npos);
      CHECK(line.find(db.schema) != std::string::npos);
      CHECK(line.find("; run oncely migrate") != std::string::npos);
      CHECK(line.find("does not exist") == std::string::npos);
      CHECK(line.find("LINE") == std::string::npos);
      if (row.stream == "err") CHECK(r.out.empty());  // nothing half-said before the error
    }
  }

}  // TEST_SUITE
