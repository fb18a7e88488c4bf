// Completed jobs' records (schema 27): what each way of completing a job leaves in its
// marker (attempt, run time, worker, trace id, output), the 64 KiB limit on an output,
// `oncely jobs show --key` and `jobs list --state completed`, and who may read an output.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "oncely/dead_letters.hpp"
#include "oncely/errors.hpp"
#include "oncely/jobs.hpp"
#include "oncely/runtime.hpp"
#include "support/builtin_runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/roles.hpp"
#include "support/runtime_helpers.hpp"
#include "support/scoped_env.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;
using oncely::QueueConfig;

namespace {

QueueConfig queue_in(QueueConfig::Mode mode) {
  QueueConfig queue = fast_retries(3);
  queue.mode = mode;
  queue.lease = 5s;
  return queue;
}

/// The completed record of job `id`, as an operator reads it (the test fails without one).
oncely::CompletedJob record_of(const PgFixture& db, long id) {
  oncely::CompletedJobFilter filter;
  filter.id = id;
  const auto page = oncely::list_completed_jobs(oncely::DatabaseUrl(db.url), db.schema, filter, 10, std::nullopt, true);
  REQUIRE_MESSAGE(page.jobs.size() == 1, "job " << id << " has no completed record");
  return page.jobs.front();
}

std::string this_worker() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

/// The schema's lease queue `queue` for the protocol's lease_jobs().
void lease_policy(PgFixture& db, const std::string& queue) {
  db.exec("INSERT INTO " + db.table("queue_policies") +
          " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, job_timeout) VALUES (" +
          db.conn->quote(queue) + ", 'lease', '30 seconds', 3, '1 second', '1 hour', 'none', '5 minutes')");
}

}  // namespace

TEST_SUITE("history") {
  TEST_CASE("history: a C++ handler's output and its attempt, run time, worker and trace are its job's record") {
    auto mode = QueueConfig::Mode::transaction;
    SUBCASE("transaction mode") {}
    SUBCASE("lease mode") { mode = QueueConfig::Mode::lease; }
    PgFixture db;
    EventRecorder events;
    oncely::Runtime runtime(config_for(db, queue_in(mode)), quiet_options(events));
    std::atomic<int> charge_calls{0};
    runtime.handle("charge", [&](oncely::JobContext& job) {
      if (charge_calls++ == 0) throw std::runtime_error("card network down");  // the first attempt fails
      std::this_thread::sleep_for(20ms);
      job.set_output({{"charge", "ch_" + job.idempotency_key()}, {"cents", job.payload().at("cents")}});
    });
    runtime.handle("quiet", [](oncely::JobContext&) {});
    runtime.handle("huge", [](oncely::JobContext& job) { job.set_output(std::string(70000, 'x')); });
    const long charge = enqueue(db, "charge", {{"cents", 12345678901234567LL}}, "payment-1001");
    db.exec("UPDATE " + db.table("jobs") +
            " SET trace_context = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'"
            " WHERE id = " +
            std::to_string(charge));
    const long quiet = enqueue(db, "quiet");
    const long huge = enqueue(db, "huge");
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return count(db, "jobs") == 0; }, 20s));
    CHECK(running.stop() == 0);

    const oncely::CompletedJob c = record_of(db, charge);
    CHECK(c.queue == "default");
    CHECK(c.kind == "charge");
    CHECK(c.idempotency_key == "payment-1001");
    CHECK(c.attempt == 2);
    REQUIRE(c.run_time_ms.has_value());
    CHECK(*c.run_time_ms >= 20.0);
    CHECK(*c.run_time_ms < 10000.0);
    CHECK(c.worker == this_worker());
    CHECK(c.trace_id == "0af7651916cd43dd8448eb211c80319c");
    CHECK(db.scalar<std::string>("SELECT output::text FROM " + db.table("completed_jobs") +
                                 " WHERE job_id = " + std::to_string(charge)) ==
          R"({"cents": 12345678901234567, "charge": "ch_payment-1001"})");
    CHECK(db.scalar<bool>("SELECT completed_at BETWEEN processed_at AND now() FROM " + db.table("completed_jobs") +
                          " WHERE job_id = " + std::to_string(charge)));

    const oncely::CompletedJob q = record_of(db, quiet);
    CHECK(q.attempt == 1);
    CHECK_FALSE(q.output_text.has_value());
    CHECK_FALSE(q.trace_id.has_value());

    // Over 64 KiB: refused at the handler, the job failing permanently with the reason.
    const DeadLetterRow dead = dead_letter(db, huge);
    CHECK(dead.error_class == "permanent");
    CHECK(dead.last_error == "output is 70002 bytes of JSON, over the limit of 65536 (64 KiB)");
    CHECK(count(db, "processed_jobs", "job_id = " + std::to_string(huge)) == 0);
  }

  TEST_CASE("history: the sql handler keeps its RETURNING row, or all its rows, as the output") {
    auto mode = QueueConfig::Mode::transaction;
    SUBCASE("transaction mode") {}
    SUBCASE("lease mode") { mode = QueueConfig::Mode::lease; }
    PgFixture db;
    const std::string charges = db.table("charges");
    db.exec("CREATE TABLE " + charges + " (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, cents bigint)");
    const nlohmann::json declarations = {
        {"charge",
         {{"type", "sql"},
          {"statement", "INSERT INTO " + charges + " (cents) VALUES ($1) RETURNING id, cents;"},
          {"params", {"/cents"}},
          {"expect_rows", 1},
          {"output", "row"}}},
        {"list",
         {{"type", "sql"},
          {"statement", "SELECT g AS n FROM generate_series(1, $1::int) AS g"},
          {"params", {"/n"}},
          {"output", "rows"}}},
        {"nothing", {{"type", "sql"}, {"statement", "SELECT 1 AS one WHERE false"}, {"output", "row"}}}};
    const long charge = enqueue(db, "charge", {{"cents", 500}}, "c-1");
    const long list = enqueue(db, "list", {{"n", 3}});
    const long nothing = enqueue(db, "nothing");
    EventRecorder events;
    auto runtime = runtime_with(db, queue_in(mode), declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(wait_until([&] { return count(db, "jobs") == 0; }, 20s));
    CHECK(running.stop() == 0);
    CHECK(count(db, "dead_letters") == 0);
    CHECK(record_of(db, charge).output_text == R"({"id": 1, "cents": 500})");
    CHECK(record_of(db, list).output_text == R"([{"n": 1}, {"n": 2}, {"n": 3}])");
    CHECK_FALSE(record_of(db, nothing).output_text.has_value());
  }

  TEST_CASE("history: a sql handler's output needs rows to return, said at start-up") {
    PgFixture db;
    db.exec("CREATE TABLE " + db.table("t") + " (n int)");
    const nlohmann::json declarations = {
        {"k", {{"type", "sql"}, {"statement", "INSERT INTO " + db.table("t") + " VALUES (1)"}, {"output", "row"}}}};
    EventRecorder events;
    auto runtime = runtime_with(db, {}, declarations, events);
    CHECK_THROWS_WITH_AS(runtime->run(), doctest::Contains("RETURNING"), oncely::ConfigError);
    const nlohmann::json wrong = {{"k", {{"type", "sql"}, {"statement", "SELECT 1"}, {"output", "all"}}}};
    CHECK_THROWS_WITH_AS(runtime_with(db, {}, wrong, events), doctest::Contains("must be \"row\""),
                         oncely::ConfigError);
  }

  TEST_CASE("history: an http handler asked for its output keeps a 2xx response's JSON body") {
    auto mode = QueueConfig::Mode::transaction;
    SUBCASE("transaction mode") {}
    SUBCASE("lease mode") { mode = QueueConfig::Mode::lease; }
    PgFixture db;
    const ScopedEnv token("ONCELY_HISTORY_TOKEN", "s3cr3t");  // a header's secret, substituted
    httplib::Server server;
    server.Post("/charge", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(R"({"charge": "ch_)" + req.get_header_value("Idempotency-Key") + R"(", "secret": "s3cr3t"})",
                      "application/json");
    });
    server.Post("/empty", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
    server.Post("/text", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    server.Post("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("\"" + std::string(70000, 'x') + "\"", "application/json");
    });
    const int port = server.bind_to_any_port("127.0.0.1");
    std::thread listener([&] { server.listen_after_bind(); });
    REQUIRE(wait_until([&] { return server.is_running(); }, 5s));
    const auto at = [&](const std::string& path) {
      return nlohmann::json{{"type", "http"},
                            {"url", "http://127.0.0.1:" + std::to_string(port) + path},
                            {"headers", {{"X-Token", "${ONCELY_HISTORY_TOKEN}"}}},
                            {"output", "json"}};
    };
    const nlohmann::json declarations = {
        {"charge", at("/charge")}, {"empty", at("/empty")}, {"text", at("/text")}, {"big", at("/big")}};
    const long charge = enqueue(db, "charge", nlohmann::json::object(), "pay-9");
    const long empty = enqueue(db, "empty");
    const long text = enqueue(db, "text");
    const long big = enqueue(db, "big");
    EventRecorder events;
    auto runtime = runtime_with(db, queue_in(mode), declarations, events);
    {
      RunningRuntime running(*runtime);
      REQUIRE(wait_until([&] { return count(db, "jobs") == 0; }, 20s));
      CHECK(running.stop() == 0);
    }
    server.stop();
    listener.join();
    // What the receiver echoed of a header's secret is masked, as in an error's excerpt.
    CHECK(record_of(db, charge).output_text == R"({"charge": "ch_pay-9", "secret": "***"})");
    CHECK_FALSE(record_of(db, empty).output_text.has_value());
    CHECK(dead_letter(db, text).last_error == "output is not JSON");
    CHECK(dead_letter(db, big).last_error == "output is 70002 bytes of JSON, over the limit of 65536 (64 KiB)");
  }

  TEST_CASE("history: the protocol's complete_job and complete_jobs keep outputs; over 64 KiB is 54000") {
    PgFixture db;
    lease_policy(db, "q");
    const auto enqueue_in_q = [&](const std::string& key) {
      return db.scalar<long>("INSERT INTO " + db.table("jobs") + " (queue, kind, idempotency_key) VALUES ('q', 'k', " +
                             db.conn->quote(key) + ") RETURNING id");
    };
    for (const char* key : {"a", "b", "c", "d"}) enqueue_in_q(key);
    std::map<std::string, std::pair<long, long>> leased;  // key -> (id, token)
    for (const auto& row : db.exec("SELECT idempotency_key, id, lease_token FROM " + db.table("lease_jobs") +
                                   "('q', 10, NULL, 'py-worker-7')")) {
      leased[row[0].as<std::string>()] = {row[1].as<long>(), row[2].as<long>()};
    }
    REQUIRE(leased.size() == 4);
    const auto id = [&](const char* key) { return std::to_string(leased[key].first); };
    const auto token = [&](const char* key) { return std::to_string(leased[key].second); };

    db.exec("SELECT " + db.table("complete_job") + "(" + id("a") + ", " + token("a") + ", '{\"sent\": true}')");
    {
      pqxx::work tx(*db.conn);
      CHECK_THROWS_WITH_AS(tx.exec("SELECT " + db.table("complete_job") + "(" + id("b") + ", " + token("b") +
                                   ", to_jsonb(repeat('x', 70000)))"),
                           doctest::Contains("output is 70002 bytes of JSON, over the limit of 65536 (64 KiB)"),
                           pqxx::sql_error);
    }
    CHECK(count(db, "jobs", "id = " + id("b")) == 1);  // nothing was done
    {
      pqxx::work tx(*db.conn);
      try {
        tx.exec("SELECT * FROM " + db.table("complete_jobs") + "(ARRAY[" + id("c") + ", " + id("d") + "], ARRAY[" +
                token("c") + ", " + token("d") + "], ARRAY[NULL, repeat('1', 65537)])");
        FAIL("complete_jobs took an output over the limit");
      } catch (const pqxx::sql_error& e) {
        CHECK(e.sqlstate() == "54000");
        CHECK(std::string(e.what()).find("job " + id("d")) != std::string::npos);
      }
    }
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("complete_jobs") + "(ARRAY[" + id("b") + ", " + id("c") +
                          ", " + id("d") + "], ARRAY[" + token("b") + ", " + token("c") + ", " + token("d") +
                          "], ARRAY['[1, 2]', NULL])") == 3);

    const oncely::CompletedJob a = record_of(db, leased["a"].first);
    CHECK(a.output_text == R"({"sent": true})");
    CHECK(a.worker == "py-worker-7");
    CHECK(a.attempt == 1);
    CHECK(a.run_time_ms.has_value());
    CHECK(record_of(db, leased["b"].first).output_text == "[1, 2]");
    CHECK_FALSE(record_of(db, leased["c"].first).output_text.has_value());
    CHECK_FALSE(record_of(db, leased["d"].first).output_text.has_value());
  }

  TEST_CASE("history: jobs show --key finds a completed job, a dead letter, or says there is none") {
    PgFixture db;
    EventRecorder events;
    oncely::Runtime runtime(config_for(db, fast_retries(1)), quiet_options(events));
    runtime.handle("pay", [](oncely::JobContext& job) {
      if (job.payload().value("fail", false)) throw oncely::PermanentError("card declined");
      job.set_output({{"receipt", "r-" + job.idempotency_key()}});
    });
    const long paid = enqueue(db, "pay", nlohmann::json::object(), "payment-1001");
    const long declined = enqueue(db, "pay", {{"fail", true}}, "payment-1002");
    {
      RunningRuntime running(runtime);
      REQUIRE(wait_until([&] { return count(db, "jobs") == 0; }, 20s));
      CHECK(running.stop() == 0);
    }
    const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};

    const ProcessResult completed = run_process(oncely_cli({"jobs", "show", "--key", "payment-1001"}), env);
    CAPTURE(completed.out);
    CAPTURE(completed.err);
    CHECK(completed.exit_code == 0);
    CHECK(completed.out.find("job " + std::to_string(paid) + " (completed)") != std::string::npos);
    CHECK(completed.out.find("attempt       1") != std::string::npos);
    CHECK(completed.out.find(R"(output        {"receipt": "r-payment-1001"})") != std::string::npos);
    const ProcessResult as_json =
        run_process(oncely_cli({"jobs", "show", "--id", std::to_string(paid), "--json"}), env);
    CAPTURE(as_json.out);
    REQUIRE(as_json.exit_code == 0);
    const nlohmann::json shown = nlohmann::json::parse(as_json.out);
    REQUIRE(shown["completed"].size() == 1);
    CHECK(shown["completed"][0]["output"]["receipt"] == "r-payment-1001");
    CHECK(shown["completed"][0]["worker"] == this_worker());

    const ProcessResult dead = run_process(oncely_cli({"jobs", "show", "--key", "payment-1002"}), env);
    CHECK(dead.exit_code == 0);
    CHECK(dead.out.find("job " + std::to_string(declined) + " (dead-lettered") != std::string::npos);
    CHECK(dead.out.find("class permanent): oncely dlq show --id ") != std::string::npos);

    const ProcessResult unknown = run_process(oncely_cli({"jobs", "show", "--key", "payment-9999"}), env);
    CHECK(unknown.exit_code == 1);
    CHECK(unknown.err ==
          "oncely: error: no job with key payment-9999 queued, completed within the dedup window, or "
          "dead-lettered\n");

    const ProcessResult both = run_process(oncely_cli({"jobs", "show", "7", "--key", "x"}), env);
    CHECK(both.exit_code != 0);

    const ProcessResult listed = run_process(oncely_cli({"jobs", "list", "--state", "completed", "--json"}), env);
    REQUIRE(listed.exit_code == 0);
    const nlohmann::json page = nlohmann::json::parse(listed.out);
    REQUIRE(page["jobs"].size() == 1);
    CHECK(page["jobs"][0]["id"] == paid);
    CHECK_FALSE(page["jobs"][0].contains("output"));  // a list does not read outputs
    const ProcessResult refused =
        run_process(oncely_cli({"jobs", "list", "--state", "completed", "--error", "x"}), env);
    CHECK(refused.exit_code != 0);
    CHECK(refused.err.find("--queue, --kind and --key") != std::string::npos);
  }

  TEST_CASE("history: completed jobs page newest first, by key across kinds, by queue and kind") {
    PgFixture db;
    db.exec(
        "INSERT INTO " + db.table("processed_jobs") + " (kind, idempotency_key, job_id, queue) SELECT " +
        "CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END, 'k-' || (i % 5), i, CASE WHEN i <= 3 THEN 'a' ELSE 'b' END "
        "FROM generate_series(1, 5) AS i");
    const oncely::DatabaseUrl url(db.url);
    oncely::CompletedJobFilter all;
    const auto first = oncely::list_completed_jobs(url, db.schema, all, 2);
    REQUIRE(first.jobs.size() == 2);
    CHECK(first.jobs[0].id == 5);
    CHECK(first.jobs[1].id == 4);
    CHECK(first.next_before == 4);
    const auto second = oncely::list_completed_jobs(url, db.schema, all, 2, first.next_before);
    CHECK(second.jobs.size() == 2);
    CHECK(second.jobs[0].id == 3);
    oncely::CompletedJobFilter by_key;
    by_key.idempotency_key = "k-1";  // job 1 ("odd")
    const auto keyed = oncely::list_completed_jobs(url, db.schema, by_key, 10);
    REQUIRE(keyed.jobs.size() == 1);
    CHECK(keyed.jobs[0].id == 1);
    CHECK(keyed.jobs[0].output_hidden);
    by_key.idempotency_key = "k-2";  // job 2 ("even")
    CHECK(oncely::list_completed_jobs(url, db.schema, by_key, 10).jobs.at(0).id == 2);
    oncely::CompletedJobFilter queue_kind;
    queue_kind.queue = "b";
    queue_kind.kind = "even";
    const auto qk = oncely::list_completed_jobs(url, db.schema, queue_kind, 10);
    REQUIRE(qk.jobs.size() == 1);
    CHECK(qk.jobs[0].id == 4);
    CHECK_FALSE(qk.jobs[0].attempt.has_value());  // written as before schema 27
  }

  TEST_CASE("history: the viewer role reads completed jobs but never their outputs") {
    PgFixture db;
    Roles roles(db);
    REQUIRE(roles.migrated.exit_code == 0);
    db.exec("INSERT INTO " + db.table("processed_jobs") +
            " (kind, idempotency_key, job_id, queue, output) VALUES ('k', 'key', 1, 'q', '{\"secret\": 1}')");
    const oncely::DatabaseUrl viewer(roles.url["viewer"]);
    oncely::CompletedJobFilter filter;
    const auto page = oncely::list_completed_jobs(viewer, db.schema, filter, 10);
    REQUIRE(page.jobs.size() == 1);
    CHECK_FALSE(page.jobs[0].output_text.has_value());
    CHECK_THROWS_AS(oncely::list_completed_jobs(viewer, db.schema, filter, 10, std::nullopt, true),
                    oncely::DatabaseError);
    CHECK_FALSE(oncely::payload_access(viewer, db.schema).outputs);
    const oncely::DatabaseUrl op(roles.url["operator"]);
    CHECK(oncely::list_completed_jobs(op, db.schema, filter, 10, std::nullopt, true).jobs.at(0).output_text ==
          R"({"secret": 1})");
    CHECK(oncely::payload_access(op, db.schema).outputs);
  }
}  // TEST_SUITE
