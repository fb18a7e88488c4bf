#include <doctest/doctest.h>

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("cli: a bad schema name is one line and a non-zero exit") {
    const ProcessResult r = run_process(oncely_cli({"migrate", "--schema", "x; drop table y"}),
                                        EnvChanges{{"DATABASE_URL", test_database_url()}});
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("invalid schema name 'x; drop table y'") != std::string::npos);
  }

  TEST_CASE("cli: an unreachable database is one line, non-zero, and the password is masked") {
    // Port 1 on loopback: nothing listens there.
    const ProcessResult r = run_process(oncely_cli({"migrate"}),
                                        EnvChanges{{"DATABASE_URL", "postgresql://app:Sup3rS3cret@127.0.0.1:1/jobs"}});
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.starts_with("oncely: error: cannot connect to postgresql://app:***@127.0.0.1:1/jobs: "));
    CHECK(r.err.find("Sup3rS3cret") == std::string::npos);
    CHECK(r.out.empty());
  }

  TEST_CASE("cli: enqueue inserts the job it was given and prints its id") {
    PgFixture db;
    const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
    const ProcessResult r =
        run_process(oncely_cli({"enqueue", "send_receipt", R"({"payment_id": 7})", "--queue", "mail", "--key", "pay-7",
                                "--priority", "-2", "--max-attempts", "3", "--run-at", "+5m"}),
                    env);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const long id = std::stol(r.out);
    const pqxx::row job = db.exec(
        "SELECT kind, payload->>'payment_id', queue, idempotency_key, priority, max_attempts, "
        "run_at BETWEEN now() + interval '4 minutes' AND now() + interval '6 minutes' FROM " +
        db.table("jobs") + " WHERE id = " + std::to_string(id))[0];
    CHECK(job[0].as<std::string>() == "send_receipt");
    CHECK(job[1].as<std::string>() == "7");
    CHECK(job[2].as<std::string>() == "mail");
    CHECK(job[3].as<std::string>() == "pay-7");
    CHECK(job[4].as<int>() == -2);
    CHECK(job[5].as<int>() == 3);
    CHECK(job[6].as<bool>());

    SUBCASE("an absolute --run-at is read by Postgres") {
      const ProcessResult at = run_process(oncely_cli({"enqueue", "k", "--run-at", "2030-01-02T03:04:05Z"}), env);
      REQUIRE(at.exit_code == 0);
      CHECK(db.scalar<std::string>("SELECT to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') FROM " +
                                   db.table("jobs") + " WHERE id = " + at.out) == "2030-01-02 03:04:05");
    }
  }

  TEST_CASE("cli: enqueue refuses bad input with one line and adds nothing") {
    PgFixture db;
    const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
    for (const auto& args : std::vector<std::vector<std::string>>{{"enqueue", "k", "{not json"},
                                                                  {"enqueue", "k", "--run-at", "+5 sex"},
                                                                  {"enqueue", "k", "--run-at", "next tuesday-ish"},
                                                                  {"enqueue", "k", "--priority", "40000"},
                                                                  {"enqueue", "k", "--key", ""},
                                                                  {"enqueue", ""}}) {
      const ProcessResult r = run_process(oncely_cli(args), env);
      CAPTURE(args.back());
      CAPTURE(r.err);
      CHECK(r.exit_code != 0);
      CHECK(lines(r.err) == 1);
      CHECK(r.err.starts_with("oncely: error: "));
    }
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0);
  }

  TEST_CASE("cli: oncely worker --log-format json writes one JSON object per line, job fields included") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, payload) VALUES ('update_balance', '{\"user_id\": 1}')");
    const std::string config = "/tmp/oncely_cli_json_" + db.schema + ".json";
    {
      std::ofstream file(config);
      file << R"({"handlers": {"update_balance": {"type": "sql", "statement": "SELECT $1::int + $2::int",
                                                 "params": ["/user_id", "/cents"]}}})";
    }
    Process worker(oncely_cli({"--log-format", "json", "worker", "--config", config}),
                   EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    REQUIRE(wait_until([&] { return db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters")) == 1; }, 20s));
    worker.signal(SIGTERM);
    const ProcessResult r = worker.wait();
    std::remove(config.c_str());
    CHECK(r.exit_code == 0);
    std::istringstream lines(r.err);
    std::string line;
    int job_lines = 0;
    while (std::getline(lines, line)) {
      CAPTURE(line);
      const auto json = nlohmann::json::parse(line);  // throws (fails) on anything else
      CHECK(json.contains("ts"));
      CHECK(json.contains("level"));
      if (json.value("msg", "") == "job dead-lettered") {
        ++job_lines;
        CHECK(json["queue"] == "default");
        CHECK(json["kind"] == "update_balance");
        CHECK(json["id"].is_number());
        CHECK(json["attempt"] == 1);
        CHECK(json["error"] == "payload has no /cents (parameter $2)");
      }
    }
    CHECK(job_lines == 1);
  }

}  // TEST_SUITE
