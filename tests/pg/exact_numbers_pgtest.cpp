// Payload numbers end to end: whatever way a job is enqueued (SQL INSERT, `oncely enqueue
// -`, `oncely enqueue KIND PAYLOAD`, the C++ Client), its numbers are stored and reach a
// handler's SQL, an exec child's stdin and an http body digit for digit; a C++ handler
// asking for a number no double can hold gets an unreadable error, never inf or 0.
// Compared in SQL, as numeric: equal values and equal text (the same scale).
#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "handlers/builtin_handlers.hpp"
#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

// What a double cannot keep: 17 significant digits, an integer beyond 64 bits, a number
// below (1.5e-400, 1e-21 is fine) or above (1e400) a double's range.
const std::vector<std::string> kNumbers = {"12345678901234567.89", "99999999999999999999", "1.5e-400",
                                           "-0.000000000000000000001", "1e400"};

std::string payload_for(const std::string& source, std::size_t n) {
  return R"({"source": ")" + source + R"(", "n": )" + std::to_string(n) + R"(, "cents": )" + kNumbers.at(n) + "}";
}

std::shared_ptr<spdlog::logger> quiet_logger() {
  auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  log->set_level(spdlog::level::off);
  return log;
}

std::unique_ptr<oncely::Runtime> runtime_with(const PgFixture& db, const nlohmann::json& declarations,
                                              EventRecorder& events) {
  const auto log = quiet_logger();
  oncely::RuntimeOptions options;
  options.logger = log;
  options.on_event = events.callback();
  options.handle_signals = false;
  oncely::Config config;
  config.database_url = db.url;
  config.schema = db.schema;
  oncely::QueueConfig queue{.max_attempts = 1};
  config.queues = {{"default", queue}};
  config.shutdown_grace = 10s;
  auto runtime = std::make_unique<oncely::Runtime>(config, std::move(options));
  for (auto& [kind, handler] : oncely::detail::build_builtin_handlers(declarations, true, log)) {
    runtime->handle(kind, std::move(handler.run), handler.options);
  }
  return runtime;
}

long count(PgFixture& db, const std::string& table, const std::string& where = "true") {
  return db.scalar<long>("SELECT count(*) FROM " + db.table(table) + " WHERE " + where);
}

/// The numbers of `got` (a query of (n int, value numeric)) that are not kNumbers[n] digit
/// for digit, as "n: what it is; ..." ("n: missing" when absent); "" when all are right.
std::string wrong_numbers(PgFixture& db, const std::string& got) {
  std::string want;
  for (std::size_t n = 0; n < kNumbers.size(); ++n) {
    want += (n ? ", (" : "(") + std::to_string(n) + ", '" + kNumbers[n] + "'::numeric)";
  }
  const pqxx::result rows =
      db.exec("WITH want(n, v) AS (VALUES " + want + "), got(n, v) AS (" + got +
              ") SELECT want.n, coalesce(left(got.v::text, 40), 'missing') FROM want LEFT JOIN got USING (n)"
              " WHERE got.v IS NULL OR got.v <> want.v OR got.v::text <> want.v::text"
              " UNION ALL SELECT n, 'more than once' FROM got GROUP BY n HAVING count(*) > 1 ORDER BY 1");
  std::string wrong;
  for (const auto& row : rows)
    wrong += (wrong.empty() ? "" : "; ") + row[0].as<std::string>() + ": " + row[1].as<std::string>();
  return wrong;
}

/// The numbers the jobs of `source` hold in the jobs table.
std::string wrong_stored(PgFixture& db, const std::string& source) {
  return wrong_numbers(db, "SELECT (payload->>'n')::int, (payload->>'cents')::numeric FROM " + db.table("jobs") +
                               " WHERE payload->>'source' = '" + source + "'");
}

/// Runs an sql handler over every job, INSERT ... VALUES ($1, $2, $3::numeric), and returns
/// the numbers it applied wrongly.
std::string wrong_applied(PgFixture& db, const std::string& source) {
  const std::string applied = db.table("applied");
  db.exec("CREATE TABLE IF NOT EXISTS " + applied + " (source text, n int, cents numeric NOT NULL)");
  const nlohmann::json declarations = {
      {"apply",
       {{"type", "sql"},
        {"statement", "INSERT INTO " + applied + " (source, n, cents) VALUES ($1, $2, $3::numeric)"},
        {"params", {"/source", "/n", "/cents"}}}}};
  EventRecorder events;
  auto runtime = runtime_with(db, declarations, events);
  {
    RunningRuntime running(*runtime);
    CHECK_MESSAGE(wait_until([&] { return count(db, "jobs") == 0; }, 20s), "the jobs were not all processed");
    CHECK(running.stop() == 0);
  }
  CHECK(count(db, "dead_letters") == 0);
  return wrong_numbers(db, "SELECT n, cents FROM " + applied + " WHERE source = '" + source + "'");
}

}  // namespace

TEST_SUITE("exact_numbers") {
  TEST_CASE("exact_numbers: jobs INSERTed with SQL: an sql handler binds every payload number digit for digit") {
    PgFixture db;
    for (std::size_t n = 0; n < kNumbers.size(); ++n) {
      db.exec("INSERT INTO " + db.table("jobs") + " (kind, payload) VALUES ('apply', '" + payload_for("sql", n) + "')");
    }
    REQUIRE(wrong_stored(db, "sql") == "");
    CHECK(wrong_applied(db, "sql") == "");
  }

  TEST_CASE("exact_numbers: `oncely enqueue -` stores every number of its NDJSON lines digit for digit") {
    PgFixture db;
    std::string lines;
    for (std::size_t n = 0; n < kNumbers.size(); ++n)
      lines += R"({"kind": "apply", "payload": )" + payload_for("bulk", n) + "}\n";
    const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
    SUBCASE("in one COPY") {
      const ProcessResult r = run_process(oncely_cli({"enqueue", "-"}), env, lines);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    }
    SUBCASE("one INSERT per job") {
      const ProcessResult r = run_process(oncely_cli({"enqueue", "-", "--batch-size", "1"}), env, lines);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    }
    REQUIRE(wrong_stored(db, "bulk") == "");
    CHECK(wrong_applied(db, "bulk") == "");
  }

  TEST_CASE("exact_numbers: `oncely enqueue KIND PAYLOAD` stores every number digit for digit") {
    PgFixture db;
    const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
    for (std::size_t n = 0; n < kNumbers.size(); ++n) {
      const ProcessResult r = run_process(oncely_cli({"enqueue", "apply", payload_for("cli", n)}), env);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    }
    REQUIRE(wrong_stored(db, "cli") == "");
    CHECK(wrong_applied(db, "cli") == "");

    const ProcessResult bad = run_process(oncely_cli({"enqueue", "apply", R"({"cents": 1)"}), env);
    CHECK(bad.exit_code != 0);
    CHECK_MESSAGE(bad.err.find("PAYLOAD_JSON: not valid JSON at byte 12") != std::string::npos, bad.err);
  }

  TEST_CASE("exact_numbers: the Client's payload_json is stored digit for digit by every enqueue") {
    PgFixture db;
    oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
    const auto job = [](std::size_t n) {
      return oncely::NewJob{.kind = "apply", .payload_json = payload_for("client", n)};
    };
    client.enqueue(job(0));  // a prepared autocommit INSERT
    client.enqueue(job(1));
    {
      pqxx::work tx{*db.conn};  // transactional: an unnamed INSERT on the caller's connection
      client.enqueue(tx, job(2));
      tx.commit();
    }
    CHECK(client.enqueue_batch({job(3), job(4)}).size() == 2);  // COPY
    REQUIRE(wrong_stored(db, "client") == "");
    CHECK(wrong_applied(db, "client") == "");

    CHECK_THROWS_WITH_AS(client.enqueue({.kind = "apply", .payload_json = R"({"cents": 1e400)"}),
                         "payload_json: not valid JSON at byte 16: unexpected end of text; expected ',' or '}'",
                         oncely::ConfigError);
  }

  TEST_CASE(
      "exact_numbers: a C++ handler's payload() refuses a number beyond a double as unreadable; "
      "payload_text() is exact, and the rest of the batch runs") {
    PgFixture db;
    const std::string seen = db.table("seen");
    db.exec("CREATE TABLE " + seen + " (n int, payload jsonb, as_double text)");
    for (std::size_t n = 0; n < kNumbers.size(); ++n) {
      db.exec("INSERT INTO " + db.table("jobs") + " (kind, payload) VALUES ('read', '" + payload_for("cpp", n) + "')");
    }
    EventRecorder events;
    auto runtime = runtime_with(db, nlohmann::json::object(), events);
    runtime->handle("read", [&](oncely::JobContext& job) {
      const nlohmann::json& payload = job.payload();
      job.tx().exec_params("INSERT INTO " + seen + " VALUES ($1, $2::jsonb, $3)", payload.at("n").get<int>(),
                           std::string(job.payload_text()), payload.at("cents").dump());
    });
    {
      RunningRuntime running(*runtime);
      CHECK(wait_until([&] { return count(db, "jobs") == 0; }, 20s));
      CHECK(running.stop() == 0);
    }
    CHECK(events.count(Outcome::completed) == 3);
    // 1.5e-400 (nlohmann would read 0) and 1e400 (nlohmann cannot read it): refused at once.
    const pqxx::result dead = db.exec("SELECT (payload->>'n')::int, error_class, attempts, last_error FROM " +
                                      db.table("dead_letters") + " ORDER BY 1");
    REQUIRE(dead.size() == 2);
    CHECK(dead[0][0].as<int>() == 2);
    CHECK(dead[1][0].as<int>() == 4);
    for (const auto& row : dead) {
      CAPTURE(row[3].as<std::string>());
      CHECK(row[1].as<std::string>() == "unreadable");
      CHECK(row[2].as<int>() == 1);
      CHECK(row[3].as<std::string>().starts_with("payload number "));
      CHECK(row[3].as<std::string>().find(" is out of range for a double") != std::string::npos);
    }
    // What the handlers could read: payload_text() exactly; payload() the nearest doubles.
    const pqxx::result rows =
        db.exec("SELECT n, (payload->>'cents')::numeric = (ARRAY['" + kNumbers[0] + "', '" + kNumbers[1] + "', '0', '" +
                kNumbers[3] + "'])[n + 1]::numeric, as_double FROM " + seen + " ORDER BY n");
    REQUIRE(rows.size() == 3);
    for (const auto& row : rows) CHECK(row[1].as<bool>());
    CHECK(rows[0][2].as<std::string>() == "1.2345678901234568e+16");
  }

  TEST_CASE("exact_numbers: exec and http handlers pass the payload's numbers on digit for digit") {
    PgFixture db;
    TempDir dir;
    const std::string script = dir.write("record.sh", "#!/bin/bash\ncat > \"$OUT_DIR/$ONCELY_JOB_ID.stdin\"\n");

    httplib::Server server;
    std::mutex mutex;
    std::vector<std::string> bodies;
    server.Post("/hook", [&](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex);
      bodies.push_back(req.body);
      res.status = 200;
    });
    const int port = server.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    std::thread serving([&] { server.listen_after_bind(); });
    struct Stop {
      httplib::Server& server;
      std::thread& thread;
      ~Stop() {
        server.stop();
        thread.join();
      }
    } stop{server, serving};
    REQUIRE(wait_until([&] { return server.is_running(); }, 5s));

    std::string numbers;  // {"n0": 12345678901234567.89, "n1": ...}
    for (std::size_t n = 0; n < kNumbers.size(); ++n)
      numbers += (n ? ", \"n" : "\"n") + std::to_string(n) + "\": " + kNumbers[n];
    const std::string payload = "{" + numbers + "}";
    const long exec_id = db.scalar<long>("INSERT INTO " + db.table("jobs") + " (kind, payload) VALUES ('run', '" +
                                         payload + "') RETURNING id");
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, payload) VALUES ('post', '" + payload + "')");
    const nlohmann::json declarations = {
        {"run", {{"type", "exec"}, {"command", {script}}, {"env", {{"OUT_DIR", dir.path().string()}}}}},
        {"post", {{"type", "http"}, {"url", "http://127.0.0.1:" + std::to_string(port) + "/hook"}}}};
    EventRecorder events;
    auto runtime = runtime_with(db, declarations, events);
    {
      RunningRuntime running(*runtime);
      CHECK(wait_until([&] { return count(db, "jobs") == 0; }, 20s));
      CHECK(running.stop() == 0);
    }
    CHECK(events.count(Outcome::completed) == 2);
    const std::string stdin_text = dir.read(std::to_string(exec_id) + ".stdin");
    std::string body;
    {
      std::lock_guard lock(mutex);
      REQUIRE(bodies.size() == 1);
      body = bodies[0];
    }
    // Equal as jsonb: every number equal as numeric (and no whitespace: compact JSON).
    for (const std::string& received : {stdin_text, body}) {
      CAPTURE(received.substr(0, 200));
      CHECK(db.scalar<bool>("SELECT " + db.conn->quote(received) + "::jsonb = '" + payload + "'::jsonb"));
      CHECK(received.find(R"("n0":12345678901234567.89)") != std::string::npos);
    }
    CHECK(stdin_text.ends_with("}\n"));
  }

}  // TEST_SUITE
