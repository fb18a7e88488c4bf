// `sql` handlers against a real server (issue 10, defect 6): a genuine permission-denied
// error is permanent at once with its SQLSTATE, as is every code of classes 22, 23 and 42.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "handlers/builtin_handlers.hpp"
#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

std::shared_ptr<spdlog::logger> quiet_logger() {
  auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  log->set_level(spdlog::level::off);
  return log;
}

// A Runtime on `url` serving one queue that retries at once, with the given sql handlers.
std::unique_ptr<oncely::Runtime> runtime_with(const PgFixture& db, const nlohmann::json& declarations,
                                              EventRecorder& events, bool prepared_statements = true,
                                              const std::string& url = "") {
  const auto log = quiet_logger();
  oncely::Config config;
  config.database_url = url.empty() ? db.url : url;
  config.schema = db.schema;
  oncely::QueueConfig queue{.max_attempts = 5};
  queue.backoff.schedule = {10ms};
  config.queues = {{"default", queue}};
  config.prepared_statements = prepared_statements;
  oncely::RuntimeOptions options;
  options.logger = log;
  options.on_event = events.callback();
  options.handle_signals = false;
  auto runtime = std::make_unique<oncely::Runtime>(config, std::move(options));
  for (auto& [kind, handler] : oncely::detail::build_builtin_handlers(declarations, prepared_statements, log)) {
    runtime->handle(kind, std::move(handler.run), handler.options);
  }
  return runtime;
}

long enqueue(PgFixture& db, const std::string& kind, const nlohmann::json& payload) {
  pqxx::work tx{*db.conn};
  const long id = tx.exec_params1("SELECT " + db.table("enqueue") + "($1, $2::jsonb)", kind, payload.dump())[0].as<long>();
  tx.commit();
  return id;
}

struct DeadLetter {
  std::string error_class;
  int attempts = 0;
  std::string last_error;
  nlohmann::json detail;
};

DeadLetter dead_letter(PgFixture& db, long job_id) {
  const pqxx::result r = db.exec("SELECT error_class, attempts, last_error, error_detail::text FROM " +
                                 db.table("dead_letters") + " WHERE job_id = " + std::to_string(job_id));
  REQUIRE_MESSAGE(r.size() == 1, "job " << job_id << " is not in dead_letters");
  return {r[0][0].as<std::string>(), r[0][1].as<int>(), r[0][2].as<std::string>(),
          nlohmann::json::parse(r[0][3].as<std::string>())};
}

long count(PgFixture& db, const std::string& table) {
  return db.scalar<long>("SELECT count(*) FROM " + db.table(table));
}

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

}  // namespace

TEST_SUITE("sql_checks") {

// ------------------------------------------------------------------ defect 6: SQLSTATE 42

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
  auto runtime = runtime_with(db, declarations, events, true, role.url());
  RunningRuntime running(*runtime);
  REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 20s));
  running.stop();

  const DeadLetter dl = dead_letter(db, id);
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
      {"raise", {{"type", "sql"}, {"statement", "SELECT " + db.table("raise_code") + "($1)"}, {"params", {"/code"}}}}};
  // The codes libpqxx 6.4 maps to its own exception types, and some it does not.
  const std::vector<std::string> codes = {"22000", "22003", "22012", "22P02", "23000", "23502", "23503", "23505",
                                          "23514", "23P01", "42000", "42501", "42601", "42703", "42804", "42883",
                                          "42P01", "42P10"};
  std::map<long, std::string> jobs;
  for (const auto& code : codes) jobs[enqueue(db, "raise", {{"code", code}})] = code;

  EventRecorder events;
  auto runtime = runtime_with(db, declarations, events);
  RunningRuntime running(*runtime);
  REQUIRE(wait_until([&] { return count(db, "jobs") == 0; }, 30s));
  running.stop();
  CHECK(events.count(Outcome::retried) == 0);
  for (const auto& [id, code] : jobs) {
    CAPTURE(code);
    const DeadLetter dl = dead_letter(db, id);
    CHECK(dl.error_class == "permanent");
    CHECK(dl.attempts == 1);
    CHECK(dl.detail["sqlstate"] == code);
    CHECK(dl.last_error.starts_with("SQLSTATE " + code + ": raised " + code));
  }
}

}  // TEST_SUITE
