// Bad input through the CLI gets one clean line and the usage exit code (2): nothing that
// the input holds (a newline, a terminal escape) reaches the terminal raw, and nothing is
// enqueued by halves.
#include <doctest/doctest.h>

#include <algorithm>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"

using namespace oncely::test;

TEST_SUITE("hostile_input") {
  TEST_CASE("hostile_input: each shape is one escaped line on stderr with exit 2, and enqueues nothing") {
    PgFixture db;
    struct Row {
      std::vector<std::string> args;
      std::string stdin_data;
      std::string expected;  // a part of the one line
    };
    const std::vector<Row> rows = {
        {{"enqueue", "k", "--run-at", "garbage"}, "", "--run-at: 'garbage' is not a timestamp Postgres understands"},
        {{"enqueue", "k", "--run-at", "+5\nrm -rf"}, "", "--run-at: bad duration '5\\nrm -rf'"},
        {{"dlq", "list", "--older-than", "5\nX"}, "", "--older-than: bad duration '5\\nX'"},
        {{"enqueue", "-"},
         "{\"kind\":\"k\",\"\\u001b[31mevil\\nline2\":1}\n",
         "unknown field '\\u001b[31mevil\\nline2'"},
        {{"enqueue", "k\x1b[2J", "{}"}, "", "kind: must not contain control characters"},
        {{"enqueue", "k", "{}", "--queue", "q\nq"}, "", "queue: must not contain control characters"},
    };
    for (const Row& row : rows) {
      std::vector<std::string> args = row.args;
      args.insert(args.end(), {"--schema", db.schema});
      CAPTURE(row.expected);
      const ProcessResult r = run_process(oncely_cli(args), EnvChanges{{"DATABASE_URL", db.url}}, row.stdin_data);
      CAPTURE(r.err);
      CHECK(r.exit_code == 2);
      CHECK(r.out.empty());
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      CHECK(r.err.ends_with("\n"));
      CHECK(r.err.find('\x1b') == std::string::npos);
      CHECK(r.err.starts_with("oncely: error: "));
      CHECK(r.err.find(row.expected) != std::string::npos);
    }
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0);
  }

}  // TEST_SUITE
