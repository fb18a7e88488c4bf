// Secrets stay where they are: an exec child never sees the worker's database URLs,
// PG* variables or tokens it substitutes into http headers, so a program that prints its
// environment cannot put them into the log or a dead letter.
#include <doctest/doctest.h>

#include <sstream>
#include <thread>

#include <httplib.h>

#include <spdlog/spdlog.h>

#include "oncely/runtime.hpp"
#include "support/builtin_runtime.hpp"
#include "support/captured_log.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/scoped_env.hpp"
#include "support/temp_dir.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

TEST_SUITE("secrets") {
  TEST_CASE("secrets: an exec child's environment holds no database URL, PG* variable or header token") {
    PgFixture db;
    TempDir dir;
    // The worker's own secrets, as a deployment sets them.
    const std::string password = "Sup3rS3cretPw";
    ScopedEnv database_url("DATABASE_URL", ("postgresql://app:" + password + "@127.0.0.1:1/app").c_str());
    ScopedEnv pg_password("PGPASSWORD", "PgPassw0rdValue");
    // A Runtime whose Config has no listen URL takes this one: the test database's own, with a
    // password the server (trust) never asks for.
    const std::string listen = db.url.substr(0, db.url.find('@')) + ":L1stenS3cret" + db.url.substr(db.url.find('@'));
    ScopedEnv listen_url("ONCELY_LISTEN_DATABASE_URL", listen.c_str());
    ScopedEnv token("CRM_TOKEN", "CrmT0kenValue");
    ScopedEnv shared("SHARED_SETTING", "passed-on-request");
    const std::vector<std::string> secrets = {password, "PgPassw0rdValue", "L1stenS3cret", "CrmT0kenValue"};

    // Prints its whole environment to a file and, failing, to stderr (into the dead letter).
    const std::string script = dir.write("dump-env.sh", R"(#!/bin/sh
env > "$OUT_DIR/env.$ONCELY_JOB_ID"
env >&2
exit 65
)");
    const nlohmann::json declarations = {
        {"dump",
         {{"type", "exec"},
          {"command", {script}},
          {"env", {{"OUT_DIR", dir.path().string()}, {"SHARED", "${SHARED_SETTING}"}}}}},
    };
    CapturedLog log;
    EventRecorder events;
    auto runtime = runtime_with(db, oncely::QueueConfig{.concurrency = 1}, declarations, events, true, "", log.logger);
    const auto id = db.scalar<long>("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('dump') RETURNING id");
    {
      RunningRuntime running(*runtime);
      REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
      CHECK(running.stop() == 0);
    }

    const std::string env = dir.read("env." + std::to_string(id));
    CAPTURE(env);
    for (const std::string& secret : secrets) CHECK(env.find(secret) == std::string::npos);
    for (const char* name : {"DATABASE_URL=", "PGPASSWORD=", "ONCELY_LISTEN_DATABASE_URL=", "CRM_TOKEN="}) {
      CHECK(env.find(name) == std::string::npos);
    }
    // What programs need is there, and what the handler declares (explicitly passed on too).
    CHECK(env.find("PATH=") != std::string::npos);
    CHECK(env.find("SHARED=passed-on-request") != std::string::npos);
    CHECK(env.find("ONCELY_JOB_ID=" + std::to_string(id)) != std::string::npos);

    const std::string stored = db.scalar<std::string>(
        "SELECT concat_ws(' ', last_error, errors::text, error_detail::text) FROM " + db.table("dead_letters"));
    // The dump reached the dead letter; the value substituted into the env did not.
    CHECK(stored.find("SHARED=***") != std::string::npos);
    CHECK(stored.find("passed-on-request") == std::string::npos);
    for (const std::string& secret : secrets) {
      CHECK(stored.find(secret) == std::string::npos);
      CHECK(log.text().find(secret) == std::string::npos);
    }
  }

  TEST_CASE(
      "secrets: a server that echoes the request's headers does not put the token into a dead letter or the log") {
    PgFixture db;
    ScopedEnv token("CRM_TOKEN", "CrmT0kenEchoed");
    httplib::Server server;
    server.Post("/hook", [](const httplib::Request& request, httplib::Response& response) {
      response.status = 400;
      response.set_content("bad request; you sent Authorization: " + request.get_header_value("Authorization") +
                               " and X-Api-Key: " + request.get_header_value("X-Api-Key"),
                           "text/plain");
    });
    const int port = server.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    std::thread serving([&] { server.listen_after_bind(); });
    REQUIRE(wait_until([&] { return server.is_running(); }, 5s));

    const nlohmann::json declarations = {
        {"notify",
         {{"type", "http"},
          {"url", "http://hook:UrlPassw0rd@127.0.0.1:" + std::to_string(port) + "/hook?key=QueryK3y"},
          {"headers", {{"Authorization", "Bearer ${CRM_TOKEN}"}, {"X-Api-Key", "${CRM_TOKEN}"}}}}}};
    CapturedLog log;
    EventRecorder events;
    auto runtime = runtime_with(db, oncely::QueueConfig{.concurrency = 1}, declarations, events, true, "", log.logger);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('notify')");
    {
      RunningRuntime running(*runtime);
      REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
      CHECK(running.stop() == 0);
    }
    server.stop();
    serving.join();

    const std::string stored = db.scalar<std::string>(
        "SELECT concat_ws(' ', last_error, errors::text, error_detail::text) FROM " + db.table("dead_letters"));
    CAPTURE(stored);
    CHECK(stored.find("Authorization: Bearer ***") != std::string::npos);  // the echo is there, masked
    for (const std::string secret : {"CrmT0kenEchoed", "UrlPassw0rd", "QueryK3y"}) {
      CHECK(stored.find(secret) == std::string::npos);
      CHECK(log.text().find(secret) == std::string::npos);
    }
  }

}  // TEST_SUITE
