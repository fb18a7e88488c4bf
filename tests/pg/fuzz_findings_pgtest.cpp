// Regression tests, through a real worker, for what review and the fuzz targets
// (tests/fuzz) found in what the handlers keep of outside input.
#include <doctest/doctest.h>

#include <thread>

#include <httplib.h>

#include <spdlog/spdlog.h>

#include "oncely/runtime.hpp"
#include "support/builtin_runtime.hpp"
#include "support/captured_log.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/scoped_env.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

TEST_SUITE("fuzz_findings") {
  TEST_CASE(
      "fuzz findings: a token echoed across the 2048-byte cut of a response body leaves none of itself in the dead "
      "letter") {
    PgFixture db;
    ScopedEnv token("CRM_TOKEN", "CrmT0kenAcrossTheCut");
    httplib::Server server;
    server.Post("/hook", [](const httplib::Request& request, httplib::Response& response) {
      // The echoed header value starts 8 bytes before the error detail's cut at 2048 bytes.
      response.status = 400;
      response.set_content(std::string(2040 - 15, '.') + "Authorization: " + request.get_header_value("Authorization") +
                               " and the rest of the page",
                           "text/plain");
    });
    const int port = server.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    std::thread serving([&] { server.listen_after_bind(); });
    REQUIRE(wait_until([&] { return server.is_running(); }, 5s));

    const nlohmann::json declarations = {{"notify",
                                          {{"type", "http"},
                                           {"url", "http://127.0.0.1:" + std::to_string(port) + "/hook"},
                                           {"headers", {{"Authorization", "${CRM_TOKEN}"}}}}}};
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

    const std::string body = db.scalar<std::string>("SELECT error_detail->>'body' FROM " + db.table("dead_letters"));
    CHECK(body.size() == 2048);
    CHECK(body.ends_with("Authorization: *** and "));  // masked whole, then cut
    const std::string stored = db.scalar<std::string>(
        "SELECT concat_ws(' ', last_error, errors::text, error_detail::text) FROM " + db.table("dead_letters"));
    CHECK(stored.find("CrmT0ken") == std::string::npos);
    CHECK(log.text().find("CrmT0ken") == std::string::npos);
  }

}  // TEST_SUITE
