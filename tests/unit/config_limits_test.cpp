// Configuration values that parse but cannot work are refused at start-up with their path
// and their range: each bad value below once started a worker that
// then failed every claim, pruned every marker at once, failed every maintenance pass or
// spun a thread.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "execution/rate_limiter.hpp"
#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "process/startup_checks.hpp"
#include "support/duration.hpp"

#include "support/config_errors.hpp"

using namespace std::chrono_literals;
using oncely::Config;

namespace {

using oncely::test::parse_error;

// `queue_json` as the only queue, "q".
std::string queue_doc(const std::string& queue_json) { return R"({"queues": {"q": )" + queue_json + "}}"; }

struct BadValue {
  std::string document;
  std::string error;
};

}  // namespace

TEST_SUITE("config_limits") {
  TEST_CASE("config_limits: every value that cannot work is refused, naming its path and range") {
    const std::vector<BadValue> cases = {
        // statement_timeout is an int of milliseconds: 24.8 days and more failed every claim.
        {queue_doc(R"({"job_timeout": "25d"})"), "/queues/q/job_timeout: must be between 1s and 24h (got 25d)"},
        {queue_doc(R"({"job_timeout": "24h1ms"})"),
         "/queues/q/job_timeout: must be between 1s and 24h (got 86400001ms)"},
        {queue_doc(R"({"job_timeout": "999ms"})"), "/queues/q/job_timeout: must be between 1s and 24h (got 999ms)"},
        // 0ms pruned every marker at once; 100000000d made `now() - window` overflow.
        {R"({"dedup_window": "0ms"})", "/dedup_window: must be between 1m and 3650d (got 0ms)"},
        {R"({"dedup_window": "59s"})", "/dedup_window: must be between 1m and 3650d (got 59s)"},
        {R"({"dedup_window": "100000000d"})", "/dedup_window: must be between 1m and 3650d (got 100000000d)"},
        {R"({"shutdown_grace": "0s"})", "/shutdown_grace: must be between 1s and 24h (got 0ms)"},
        {R"({"shutdown_grace": "2d"})", "/shutdown_grace: must be between 1s and 24h (got 2d)"},
        {queue_doc(R"({"poll_interval": "9ms"})"), "/queues/q/poll_interval: must be between 10ms and 1h (got 9ms)"},
        {queue_doc(R"({"poll_interval": "100000000d"})"),
         "/queues/q/poll_interval: must be between 10ms and 1h (got 100000000d)"},
        {queue_doc(R"({"backoff": {"base": "31d"}})"), "/queues/q/backoff/base: must be between 0ms and 30d (got 31d)"},
        {queue_doc(R"({"backoff": {"cap": "100000000d"}})"),
         "/queues/q/backoff/cap: must be between 0ms and 30d (got 100000000d)"},
        {queue_doc(R"({"backoff": {"schedule": ["1s", "31d"]}})"),
         "/queues/q/backoff/schedule/1: must be between 0ms and 30d (got 31d)"},
        // Below ~1e-10 the limiter's wait overflowed a cast and its thread spun.
        {queue_doc(R"({"rate_limit_per_sec": 1e-11})"),
         "/queues/q/rate_limit_per_sec: must be 0 (unlimited) or between 0.001 and 1000000 (got 1e-11)"},
        {queue_doc(R"({"rate_limit_per_sec": 0.0009})"),
         "/queues/q/rate_limit_per_sec: must be 0 (unlimited) or between 0.001 and 1000000 (got 0.0009)"},
        {queue_doc(R"({"rate_limit_per_sec": -0.5})"),
         "/queues/q/rate_limit_per_sec: must be 0 (unlimited) or between 0.001 and 1000000 (got -0.5)"},
        {queue_doc(R"({"rate_limit_per_sec": 1e300})"),
         "/queues/q/rate_limit_per_sec: must be 0 (unlimited) or between 0.001 and 1000000 (got 1e+300)"},
        // Queue names reach SQL parameters, NOTIFY payloads and log lines.
        {R"({"queues": {"a\u0000b": {}}})", R"(/queues/a\u0000b: queue name must not contain control characters)"},
        {R"({"queues": {"tab\tbed": {}}})", R"(/queues/tab\u0009bed: queue name must not contain control characters)"},
        {R"({"queues": {"line\nbreak": {}}})",
         R"(/queues/line\nbreak: queue name must not contain control characters)"},
        {R"({"queues": {"del\u007f": {}}})", R"(/queues/del\u007f: queue name must not contain control characters)"},
        {R"({"queues": {"unit\u001f": {}}})", R"(/queues/unit\u001f: queue name must not contain control characters)"},
        // 2 + 2 × (256 + 250) connections: more than any server in front of a queue.
        {R"({"queues": {"a": {"concurrency": 256}, "b": {"concurrency": 250}}})",
         "/queues: the queues need 1014 connections (2 per worker thread, plus 2), more than the limit of 1000: "
         "lower their concurrency"},
        // More digits than a double holds: a ConfigError, not std::out_of_range from stod.
        {queue_doc(R"({"job_timeout": ")" + std::string(400, '9') + R"(s"})"),
         "/queues/q/job_timeout: bad duration '" + std::string(400, '9') +
             "s' (expected e.g. 250ms, 5s, 2m, 1h30m, 7d)"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.document);
      CHECK(parse_error(c.document) == c.error);
    }
  }

  TEST_CASE("config_limits: the boundary values themselves are accepted") {
    const Config low = Config::parse(nlohmann::json::parse(R"({
      "shutdown_grace": "1s", "dedup_window": "1m",
      "queues": {"q": {"job_timeout": "1s", "poll_interval": "10ms", "rate_limit_per_sec": 0.001,
                       "backoff": {"base": "0ms", "cap": "0ms"}}}})"));
    CHECK(low.shutdown_grace == 1s);
    CHECK(low.dedup_window == 1min);
    CHECK(low.queues.at("q").job_timeout == 1s);
    CHECK(low.queues.at("q").poll_interval == 10ms);
    CHECK(low.queues.at("q").rate_limit_per_sec == 0.001);

    const Config high = Config::parse(nlohmann::json::parse(R"({
      "shutdown_grace": "24h", "dedup_window": "3650d",
      "queues": {"q": {"job_timeout": "24h", "poll_interval": "1h", "rate_limit_per_sec": 1000000,
                       "backoff": {"base": "30d", "cap": "30d"}},
                 "r": {"rate_limit_per_sec": 0, "backoff": {"schedule": ["0ms", "30d"]}}}})"));
    CHECK(high.shutdown_grace == 24h);
    CHECK(high.dedup_window == std::chrono::hours(24 * 3650));
    CHECK(high.queues.at("q").job_timeout == 24h);
    CHECK(high.queues.at("q").poll_interval == 1h);
    CHECK(high.queues.at("q").rate_limit_per_sec == 1e6);
    CHECK(high.queues.at("q").backoff.cap == std::chrono::hours(24 * 30));
    CHECK(high.queues.at("r").rate_limit_per_sec == 0);

    // Exactly 1000 connections: 2 + 2 × (256 + 243).
    const Config most = Config::parse(nlohmann::json::parse(R"({"queues": {"a": {"concurrency": 256},
                                                                          "b": {"concurrency": 243}}})"));
    CHECK(most.connections_needed() == 1000);
    CHECK(Config::parse(nlohmann::json::object()).connections_needed() == 10);  // the default queue: 4 threads

    const std::string longest_name(128, 'q');
    CHECK(Config::parse(nlohmann::json{{"queues", {{"caf\xC3\xA9 \xE2\x9C\x93", nlohmann::json::object()}}}})
              .queues.size() == 1);
    CHECK(Config::parse(nlohmann::json{{"queues", {{longest_name, nlohmann::json::object()}}}}).queues.size() == 1);
  }

  TEST_CASE("config_limits: a Config built in code is checked by validate() and by Runtime::run()") {
    Config config;
    config.validate();  // the defaults are in range
    config.queues.at("default").job_timeout = std::chrono::hours(24 * 30);
    CHECK_THROWS_WITH_AS(config.validate(), "/queues/default/job_timeout: must be between 1s and 24h (got 30d)",
                         oncely::ConfigError);

    Config bad_name;
    bad_name.queues = {{std::string("a\0b", 3), oncely::QueueConfig{}}};
    CHECK_THROWS_WITH_AS(bad_name.validate(), R"(/queues/a\u0000b: queue name must not contain control characters)",
                         oncely::ConfigError);
    Config not_utf8;
    not_utf8.queues = {{"bad \xFF", oncely::QueueConfig{}}};
    CHECK_THROWS_WITH_AS(not_utf8.validate(), "/queues/bad \xFF: queue name must be valid UTF-8", oncely::ConfigError);

    // Before it needs a database: the check comes first.
    config.database_url = "postgresql://nobody@127.0.0.1:1/none";
    oncely::RuntimeOptions options;
    options.handle_signals = false;
    oncely::Runtime runtime(config, options);
    CHECK_THROWS_WITH_AS(runtime.run(), "/queues/default/job_timeout: must be between 1s and 24h (got 30d)",
                         oncely::ConfigError);
  }

  TEST_CASE("config_limits: a server too small for the queues' connections is named with both numbers") {
    using oncely::detail::connection_budget_problem;
    CHECK_FALSE(connection_budget_problem(10, 100, 97).has_value());
    CHECK_FALSE(connection_budget_problem(97, 100, 97).has_value());
    CHECK(
        connection_budget_problem(98, 100, 97) ==
        "the queues need 98 connections (2 per worker thread, plus 2) but the server allows 97 (max_connections 100): "
        "lower their concurrency or raise max_connections");
  }

  TEST_CASE("config_limits: the rate limiter never waits a negative or overflowing time") {
    using oncely::detail::RateLimiter;
    auto now = RateLimiter::Clock::now();
    const auto clock = [&now] { return now; };
    SUBCASE("a rate far below one job per hour waits an hour at most, then asks again") {
      RateLimiter limiter(1e-11, clock);
      CHECK(limiter.try_take(5) == 1);  // the bucket starts with one token
      const auto wait = limiter.time_until_available();
      CHECK(wait > std::chrono::nanoseconds(0));
      CHECK(wait <= 1h + 1ns);
      now += 1h;
      CHECK(limiter.try_take(1) == 0);
      CHECK(limiter.time_until_available() > std::chrono::nanoseconds(0));
    }
    SUBCASE("a bucket holding more tokens than an int still hands out what is asked") {
      RateLimiter limiter(1e300, clock);
      CHECK(limiter.try_take(500) == 500);
      CHECK(limiter.time_until_available() == std::chrono::nanoseconds(0));
    }
  }

}  // TEST_SUITE
