// `sql` handlers against a real server: a genuine
// permission-denied error is permanent at once with its SQLSTATE, a statement the server
// rejects (or transaction control) stops the worker before it claims anything, naming the
// handler, expect_rows turns "matched nothing" into a permanent failure, and a process whose
// queues need more connections than the server allows refuses to start.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "handlers/builtin_handlers.hpp"
#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/builtin_runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

// A LOGIN role without superuser rights, allowed what a worker needs on the fixture's
// schema and nothing more; dropped (with its grants) at the end of the test.
class WorkerRole {
 public:
  explicit WorkerRole(PgFixture& db) : db_(db), name_(db.schema + "_app") {
    const std::string schema = "\"" + db.schema + "\"";
    db.exec("CREATE ROLE \"" + name_ + "\" LOGIN");
    db.exec("GRANT USAGE ON SCHEMA " + schema + " TO \"" + name_ + "\"");
    db.exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO \"" + name_ + "\"");
    db.exec("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA " + schema + " TO \"" + name_ + "\"");
  }
  ~WorkerRole() {
    try {
      db_.exec("DROP OWNED BY \"" + name_ + "\"");
      db_.exec("DROP ROLE \"" + name_ + "\"");
    } catch (const std::exception& e) {
      MESSAGE("could not drop role " << name_ << ": " << e.what());
    }
  }
  WorkerRole(const WorkerRole&) = delete;
  WorkerRole& operator=(const WorkerRole&) = delete;

  [[nodiscard]] const std::string& name() const { return name_; }
  /// The fixture's URL, connecting as this role (libpq: a later user= wins).
  [[nodiscard]] std::string url() const {
    return db_.url + (db_.url.find('?') == std::string::npos ? "?" : "&") + "user=" + name_;
  }

 private:
  PgFixture& db_;
  std::string name_;
};

// Runs `runtime` expecting it to refuse to start: the ConfigError's message, or a note
// that it started (registered itself) or threw something else. Never blocks for long.
std::string refusal_of(oncely::Runtime& runtime, PgFixture& db) {
  std::atomic<bool> done{false};
  std::string outcome = "(run() returned)";
  std::thread thread([&] {
    try {
      runtime.run();
    } catch (const oncely::ConfigError& e) {
      outcome = e.what();
    } catch (const std::exception& e) {
      outcome = std::string("(another error) ") + e.what();
    }
    done = true;
  });
  wait_until([&] { return done.load() || db.scalar<long>("SELECT count(*) FROM " + db.table("workers")) > 0; }, 20s);
  if (!done) {
    runtime.request_stop();
    thread.join();
    return "(it started)";
  }
  thread.join();
  return outcome;
}

// `oncely worker --config` with `config_json`, expected to refuse to start: its result once
// it exits, or after it registered itself (then killed) or 20 s.
ProcessResult run_worker_cli(PgFixture& db, const std::string& config_json) {
  TempDir dir;
  const std::string config = dir.write("worker.json", config_json, 0644);
  Process worker(oncely_cli({"worker", "--config", config}),
                 EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
  wait_until([&] { return worker.exited() || count(db, "workers") > 0; }, 20s);
  const bool exited = worker.exited();
  if (!exited) worker.signal(SIGKILL);
  ProcessResult result = worker.wait();
  CHECK_MESSAGE(exited, "the worker did not refuse to start; stderr: " << result.err);
  return result;
}

}  // namespace

TEST_SUITE("sql_checks") {
  // --------------------------------------------------------------------------- SQLSTATE 42

  TEST_CASE("sql_checks: a real permission-denied error is permanent at once, with SQLSTATE 42501 in the message") {
    PgFixture db;
    WorkerRole role(db);
    // Created after the role's grants: the role may not read it.
    const std::string balances = db.table("balances");
    db.exec("CREATE TABLE " + balances + " (account int PRIMARY KEY, cents bigint NOT NULL)");
    db.exec("INSERT INTO " + balances + " VALUES (1, 100)");
    const nlohmann::json declarations = {
        {"debit",
         {{"type", "sql"},
          {"statement", "UPDATE " + balances + " SET cents = cents - $2 WHERE account = $1"},
          {"params", {"/account", "/cents"}}}}};
    const long id = enqueue(db, "debit", {{"account", 1}, {"cents", 5}});

    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(5), declarations, events, true, role.url());
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 20s));
    running.stop();

    const DeadLetterRow dl = dead_letter(db, id);
    CHECK(dl.error_class == "permanent");
    CHECK(dl.attempts == 1);
    CHECK(dl.last_error == "SQLSTATE 42501: permission denied for table balances");
    CHECK(dl.detail["sqlstate"] == "42501");
    CHECK(events.count(Outcome::retried) == 0);
    CHECK(db.scalar<long>("SELECT cents FROM " + balances) == 100);
  }

  TEST_CASE("sql_checks: every SQLSTATE of classes 22, 23 and 42 is permanent, with the code in the message") {
    PgFixture db;
    db.exec("CREATE FUNCTION " + db.table("raise_code") +
            "(code text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'raised %', code USING ERRCODE = code; END $$");
    const nlohmann::json declarations = {
        {"raise",
         {{"type", "sql"}, {"statement", "SELECT " + db.table("raise_code") + "($1)"}, {"params", {"/code"}}}}};
    // The codes libpqxx 6.4 maps to its own exception types, and some it does not.
    const std::vector<std::string> codes = {"22000", "22003", "22012", "22P02", "23000", "23502",
                                            "23503", "23505", "23514", "23P01", "42000", "42501",
                                            "42601", "42703", "42804", "42883", "42P01", "42P10"};
    std::map<long, std::string> jobs;
    for (const auto& code : codes) jobs[enqueue(db, "raise", {{"code", code}})] = code;

    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(5), declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(wait_until([&] { return count(db, "jobs") == 0; }, 30s));
    running.stop();
    CHECK(events.count(Outcome::retried) == 0);
    for (const auto& [id, code] : jobs) {
      CAPTURE(code);
      const DeadLetterRow dl = dead_letter(db, id);
      CHECK(dl.error_class == "permanent");
      CHECK(dl.attempts == 1);
      CHECK(dl.detail["sqlstate"] == code);
      CHECK(dl.last_error.starts_with("SQLSTATE " + code + ": raised " + code));
    }
  }

  // --------------------------------------------------------- checked before anything runs

  TEST_CASE("sql_checks: oncely worker refuses to start on a statement the server rejects, naming the handler") {
    PgFixture db;
    db.exec("CREATE TABLE " + db.table("balances") + " (account int PRIMARY KEY, cents bigint NOT NULL)");
    const long id = enqueue(db, "update_balance", {{"account", 1}, {"cents", 5}});
    std::string statement;
    std::string expected;
    SUBCASE("a table name with a typo") {
      statement = "UPDATE " + db.table("balancs") + " SET cents = cents + $2 WHERE account = $1";
      expected = "oncely: error: /handlers/update_balance/statement: the database rejects the statement: relation \"" +
                 db.schema + ".balancs\" does not exist (SQLSTATE 42P01)\n";
    }
    SUBCASE("a column name with a typo") {
      statement = "UPDATE " + db.table("balances") + " SET cent = cent + $2 WHERE account = $1";
      expected =
          "oncely: error: /handlers/update_balance/statement: the database rejects the statement: column \"cent\" "
          "does not exist HINT: Perhaps you meant to reference the column \"balances.cents\". (SQLSTATE 42703)\n";
    }
    SUBCASE("transaction control, refused before connecting") {
      statement = "COMMIT";
      expected =
          "oncely: error: /handlers/update_balance/statement: must not control the transaction (COMMIT): it "
          "runs inside the batch's transaction, which only oncely ends\n";
    }
    SUBCASE("more parameters than the protocol allows") {
      statement = "SELECT $70000";
      expected =
          "oncely: error: /handlers/update_balance/statement: uses $70000, more than the 65535 parameters the "
          "protocol allows\n";
    }
    CAPTURE(statement);
    nlohmann::json config = {{"handlers", {{"update_balance", {{"type", "sql"}, {"statement", statement}}}}}};
    if (statement.find("$1") != std::string::npos)
      config["handlers"]["update_balance"]["params"] = {"/account", "/cents"};
    const ProcessResult r = run_worker_cli(db, config.dump());
    CHECK(r.exit_code == 2);
    CHECK(r.err == expected);
    // Nothing was claimed or registered.
    CHECK(count(db, "workers") == 0);
    CHECK(count(db, "dead_letters") == 0);
    CHECK(db.scalar<int>("SELECT attempts FROM " + db.table("jobs") + " WHERE id = " + std::to_string(id)) == 0);
  }

  TEST_CASE("sql_checks: the start-up check works without prepared statements and leaves nothing behind") {
    PgFixture db;
    const std::string balances = db.table("balances");
    db.exec("CREATE TABLE " + balances + " (account int PRIMARY KEY, cents bigint NOT NULL)");
    const nlohmann::json good = {{"type", "sql"},
                                 {"statement", "INSERT INTO " + balances + " VALUES ($1, $2)"},
                                 {"params", {"/account", "/cents"}}};
    const nlohmann::json typo = {{"type", "sql"},
                                 {"statement", "INSERT INTO " + db.table("balancs") + " VALUES ($1, $2)"},
                                 {"params", {"/account", "/cents"}}};
    const std::string refusal = "/handlers/insert_balance/statement: the database rejects the statement: relation \"" +
                                db.schema + ".balancs\" does not exist (SQLSTATE 42P01)";
    bool prepared = true;
    SUBCASE("with prepared statements") {}
    SUBCASE("behind a transaction-mode pooler (no prepared statements)") { prepared = false; }

    // On a connection of its own: no named statement afterwards, and the connection is fine.
    const auto handlers =
        oncely::detail::build_builtin_handlers({{"insert_balance", good}, {"typo", typo}}, prepared, nullptr);
    handlers.at("insert_balance").options.startup_check(*db.conn);
    CHECK_THROWS_AS(handlers.at("typo").options.startup_check(*db.conn), oncely::ConfigError);
    CHECK(db.scalar<long>("SELECT count(*) FROM pg_prepared_statements") == 0);

    // The runtime refuses to start, before it registers or claims.
    const long id = enqueue(db, "insert_balance", {{"account", 1}, {"cents", 5}});
    {
      EventRecorder events;
      auto runtime = runtime_with(db, fast_retries(5), {{"insert_balance", typo}}, events, prepared);
      CHECK(refusal_of(*runtime, db) == refusal);
      CHECK(count(db, "workers") == 0);
      CHECK(db.scalar<int>("SELECT attempts FROM " + db.table("jobs") + " WHERE id = " + std::to_string(id)) == 0);
    }
    // A statement that passes the check then runs as usual, prepared under its own name or not.
    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(5), {{"insert_balance", good}}, events, prepared);
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::completed, 1, 20s));
    running.stop();
    CHECK(db.scalar<long>("SELECT cents FROM " + balances + " WHERE account = 1") == 5);
  }

  // -------------------------------------------------------------------------- expect_rows

  TEST_CASE("sql_checks: expect_rows turns an UPDATE that matched nothing into a permanent failure") {
    PgFixture db;
    const std::string balances = db.table("balances");
    db.exec("CREATE TABLE " + balances + " (account int PRIMARY KEY, cents bigint NOT NULL, region text NOT NULL)");
    db.exec("INSERT INTO " + balances + " VALUES (1, 100, 'eu'), (2, 100, 'us'), (3, 100, 'us')");
    const nlohmann::json declarations = {
        {"debit",
         {{"type", "sql"},
          {"statement", "UPDATE " + balances + " SET cents = cents - $2 WHERE account = $1"},
          {"params", {"/account", "/cents"}},
          {"expect_rows", 1}}},
        {"debit_region",
         {{"type", "sql"},
          {"statement", "UPDATE " + balances + " SET cents = cents - $2 WHERE region = $1"},
          {"params", {"/region", "/cents"}},
          {"expect_rows", 1}}},
        {"credit_region",
         {{"type", "sql"},
          {"statement", "UPDATE " + balances + " SET cents = cents + $2 WHERE region = $1"},
          {"params", {"/region", "/cents"}},
          {"expect_rows", "1+"}}},
        {"unchecked",
         {{"type", "sql"},
          {"statement", "UPDATE " + balances + " SET cents = cents - $2 WHERE account = $1"},
          {"params", {"/account", "/cents"}}}}};
    const long debit_ok = enqueue(db, "debit", {{"account", 1}, {"cents", 10}});
    const long debit_missing = enqueue(db, "debit", {{"account", 99}, {"cents", 10}});
    const long debit_two = enqueue(db, "debit_region", {{"region", "us"}, {"cents", 10}});
    const long credit_two = enqueue(db, "credit_region", {{"region", "us"}, {"cents", 1}});
    const long credit_none = enqueue(db, "credit_region", {{"region", "mars"}, {"cents", 1}});
    const long unchecked_missing = enqueue(db, "unchecked", {{"account", 99}, {"cents", 10}});

    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(5), declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(wait_until([&] { return count(db, "jobs") == 0; }, 30s));
    running.stop();

    CHECK(events.count(Outcome::retried) == 0);
    CHECK(count(db, "dead_letters") == 3);
    const DeadLetterRow missing = dead_letter(db, debit_missing);
    CHECK(missing.error_class == "permanent");
    CHECK(missing.attempts == 1);
    CHECK(missing.last_error == "expected 1 row, the statement affected 0");
    CHECK(missing.detail["expect_rows"] == "1");
    CHECK(missing.detail["affected_rows"] == 0);
    const DeadLetterRow two = dead_letter(db, debit_two);
    CHECK(two.error_class == "permanent");
    CHECK(two.last_error == "expected 1 row, the statement affected 2");
    const DeadLetterRow none = dead_letter(db, credit_none);
    CHECK(none.error_class == "permanent");
    CHECK(none.last_error == "expected at least 1 row, the statement affected 0");
    CHECK(none.detail["expect_rows"] == "1+");
    // The failed jobs' writes rolled back; the others applied once each.
    CHECK(db.scalar<std::string>("SELECT string_agg(account || '=' || cents, ',' ORDER BY account) FROM " + balances) ==
          "1=90,2=101,3=101");
    for (const long id : {debit_ok, credit_two, unchecked_missing}) {
      CAPTURE(id);
      CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") +
                            " WHERE job_id = " + std::to_string(id)) == 0);
    }
  }

  // --------------------------------------------------------------- the server's connections

  TEST_CASE("sql_checks: queues needing more connections than the server allows refuse to start, with both numbers") {
    PgFixture db;
    const pqxx::row limits = db.exec(
        "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int, "
        "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)")[0];
    const int max_connections = limits[0].as<int>();
    const int available = max_connections - (limits[2].as<bool>() ? 0 : limits[1].as<int>());
    // Enough threads to need one connection more than that, within the configuration's limits.
    oncely::Config config;
    config.database_url = db.url;
    config.schema = db.schema;
    config.queues.clear();
    int threads = (available - 2) / 2 + 1;
    if (2 + 2 * threads > oncely::Config::kMaxConnections) {
      MESSAGE("max_connections " << max_connections << " is beyond what one process may need; nothing to check");
      return;
    }
    for (int q = 0; threads > 0; ++q) {
      const int here = std::min(threads, 256);
      config.queues["q" + std::to_string(q)] = oncely::QueueConfig{.concurrency = here};
      threads -= here;
    }
    const int needed = config.connections_needed();
    REQUIRE(needed > available);
    oncely::RuntimeOptions options;
    options.logger = quiet_logger();
    options.handle_signals = false;
    oncely::Runtime runtime(config, options);
    const std::string expected = "/queues: the queues need " + std::to_string(needed) +
                                 " connections (2 per worker thread, plus 2) but the server allows " +
                                 std::to_string(available) + " (max_connections " + std::to_string(max_connections) +
                                 "): lower their concurrency or raise max_connections";
    CHECK(refusal_of(runtime, db) == expected);
    CHECK(count(db, "workers") == 0);
  }

}  // TEST_SUITE
