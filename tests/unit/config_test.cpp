#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <unistd.h>

#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "support/scoped_env.hpp"

#include "support/config_errors.hpp"

using namespace std::chrono_literals;
using oncely::BackoffConfig;
using oncely::Config;

namespace {

using oncely::test::parse_error;

// The queue document `queue_json` as the only queue, "q".
std::string queue_error(const std::string& queue_json) {
  return parse_error(R"({"queues": {"q": )" + queue_json + "}}");
}

using oncely::test::ScopedEnv;

// A file in the temp directory holding `content`, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& content)
      : path_(std::filesystem::temp_directory_path() /
              ("oncely_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_id_++) + ".json")) {
    std::ofstream(path_) << content;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  static inline int next_id_ = 0;
  std::filesystem::path path_;
};

constexpr const char* kSpecExample = R"({
  "shutdown_grace": "30s",
  "dedup_window": "7d",
  "queues": {
    "critical": {"concurrency": 4, "batch_size": 50, "max_attempts": 8,
                 "backoff": {"base": "5s", "cap": "5m", "jitter": "full"},
                 "rate_limit_per_sec": 200, "job_timeout": "30s", "poll_interval": "1s"},
    "bulk":     {"concurrency": 1, "backoff": {"schedule": ["5s", "30s", "2m", "10m"]}}
  },
  "handlers": {
    "update_balance": {"type": "sql",
      "statement": "INSERT INTO balances(user_id, cents) VALUES ($1, $2) ON CONFLICT (user_id) DO UPDATE SET cents = balances.cents + EXCLUDED.cents",
      "params": ["/user_id", "/cents"]},
    "send_email": {"type": "exec", "command": ["/usr/local/bin/send-email"], "timeout": "20s"},
    "notify_crm": {"type": "http", "url": "http://127.0.0.1:8080/hooks/crm", "timeout": "10s"}
  }
})";

}  // namespace

TEST_CASE("config: the documented example parses with its values") {
  const auto document = nlohmann::json::parse(kSpecExample);
  const Config config = Config::parse(document);
  CHECK(config.shutdown_grace == 30s);
  CHECK(config.dedup_window == std::chrono::hours(24 * 7));
  REQUIRE(config.queues.size() == 2);

  const auto& critical = config.queues.at("critical");
  CHECK(critical.concurrency == 4);
  CHECK(critical.batch_size == 50);
  CHECK(critical.max_attempts == 8);
  CHECK(critical.backoff.base == 5s);
  CHECK(critical.backoff.cap == 5min);
  CHECK(critical.backoff.jitter == BackoffConfig::Jitter::full);
  CHECK(critical.backoff.schedule.empty());
  CHECK(critical.rate_limit_per_sec == 200);
  CHECK(critical.job_timeout == 30s);
  CHECK(critical.poll_interval == 1s);

  const auto& bulk = config.queues.at("bulk");
  CHECK(bulk.concurrency == 1);
  CHECK(bulk.batch_size == 500);  // the rest are defaults
  CHECK(bulk.max_attempts == 8);
  CHECK(bulk.backoff.schedule == std::vector<std::chrono::milliseconds>{5s, 30s, 2min, 10min});
  CHECK(bulk.rate_limit_per_sec == 0);
  CHECK(bulk.job_timeout == 5min);
  CHECK(bulk.poll_interval == 1s);

  CHECK(config.handlers == document.at("handlers"));
  CHECK(config.database_url.empty());  // parse() never reads the environment
  CHECK(config.schema == "oncely");
}

TEST_CASE("config: an empty document gets the defaults") {
  const Config config = Config::parse(nlohmann::json::object());
  CHECK(config.shutdown_grace == 30s);
  CHECK(config.dedup_window == std::chrono::hours(24 * 7));
  REQUIRE(config.queues.size() == 1);
  const auto& queue = config.queues.at("default");
  CHECK(queue.concurrency == 4);
  CHECK(queue.batch_size == 500);
  CHECK(queue.max_attempts == 8);
  CHECK(queue.backoff.base == 5s);
  CHECK(queue.backoff.cap == 10min);
  CHECK(queue.backoff.jitter == BackoffConfig::Jitter::equal);
  CHECK(queue.backoff.schedule.empty());
  CHECK(queue.rate_limit_per_sec == 0);
  CHECK(queue.job_timeout == 5min);
  CHECK(queue.poll_interval == 1s);
  CHECK(config.handlers == nlohmann::json::object());
  CHECK(config.schema == "oncely");
}

TEST_CASE("config: unknown key names its path") {
  CHECK(parse_error(R"({"shutdown_grase": "5s"})") == "/shutdown_grase: unknown key");
  CHECK(parse_error(R"({"queues": {"bulk": {"backof": {}}}})") == "/queues/bulk/backof: unknown key");
  CHECK(parse_error(R"({"queues": {"bulk": {"backoff": {"bass": "1s"}}}})") ==
        "/queues/bulk/backoff/bass: unknown key");
  SUBCASE("path() is the JSON pointer alone") {
    try {
      Config::parse(nlohmann::json::parse(R"({"queues": {"bulk": {"backof": {}}}})"));
      FAIL("expected a ConfigError");
    } catch (const oncely::ConfigError& e) {
      CHECK(e.path() == "/queues/bulk/backof");
    }
  }
  SUBCASE("keys with / and ~ are escaped as in RFC 6901") {
    CHECK(parse_error(R"({"queues": {"a/b~c": {"x": 1}}})") == "/queues/a~1b~0c/x: unknown key");
  }
}

TEST_CASE("config: wrong types name their path") {
  CHECK(parse_error("[]") == "the configuration must be a JSON object");
  CHECK(parse_error(R"({"queues": []})") == "/queues: must be an object");
  CHECK(parse_error(R"({"queues": {"critical": 4}})") == "/queues/critical: must be an object");
  CHECK(queue_error(R"({"backoff": "5s"})") == "/queues/q/backoff: must be an object");
  CHECK(parse_error(R"({"handlers": []})") == "/handlers: must be an object");
  CHECK(parse_error(R"({"handlers": {"send_email": "exec"}})") == "/handlers/send_email: must be an object");
  SUBCASE("integers: not strings, booleans or fractions") {
    for (const char* bad : {R"("4")", "true", "2.5", "2.0", "null"}) {
      CAPTURE(bad);
      CHECK(parse_error(std::string(R"({"queues": {"critical": {"concurrency": )") + bad + "}}}") ==
            "/queues/critical/concurrency: must be an integer");
    }
    CHECK(queue_error(R"({"batch_size": "50"})") == "/queues/q/batch_size: must be an integer");
    CHECK(queue_error(R"({"max_attempts": false})") == "/queues/q/max_attempts: must be an integer");
  }
  SUBCASE("numbers") {
    CHECK(queue_error(R"({"rate_limit_per_sec": "200"})") == "/queues/q/rate_limit_per_sec: must be a number");
    CHECK(queue_error(R"({"rate_limit_per_sec": true})") == "/queues/q/rate_limit_per_sec: must be a number");
  }
  SUBCASE("durations are strings") {
    CHECK(parse_error(R"({"shutdown_grace": 30})") == R"(/shutdown_grace: must be a duration string such as "5s")");
    CHECK(queue_error(R"({"job_timeout": 30})") == R"(/queues/q/job_timeout: must be a duration string such as "5s")");
  }
  SUBCASE("backoff members") {
    CHECK(queue_error(R"({"backoff": {"jitter": true}})") ==
          R"(/queues/q/backoff/jitter: must be "full", "equal" or "none" (got true))");
    CHECK(queue_error(R"({"backoff": {"schedule": "5s"}})") ==
          "/queues/q/backoff/schedule: must be a non-empty array of durations");
    CHECK(queue_error(R"({"backoff": {"schedule": ["5s", 30]}})") ==
          R"(/queues/q/backoff/schedule/1: must be a duration string such as "5s")");
    std::string schedule;
    for (int i = 0; i < 101; ++i) schedule += std::string(i ? "," : "") + R"("1s")";
    CHECK(queue_error(R"({"backoff": {"schedule": [)" + schedule + "]}}") ==
          "/queues/q/backoff/schedule: must have at most 100 entries");
  }
}

TEST_CASE("config: bad durations name their path and keep the duration message") {
  const std::string bad_duration = "bad duration '5 sex' (expected e.g. 250ms, 5s, 2m, 1h30m, 7d)";
  CHECK(parse_error(R"({"queues": {"critical": {"backoff": {"base": "5 sex"}}}})") ==
        "/queues/critical/backoff/base: " + bad_duration);
  CHECK(parse_error(R"({"shutdown_grace": "5 sex"})") == "/shutdown_grace: " + bad_duration);
  CHECK(parse_error(R"({"dedup_window": "5 sex"})") == "/dedup_window: " + bad_duration);
  CHECK(queue_error(R"({"backoff": {"cap": "5 sex"}})") == "/queues/q/backoff/cap: " + bad_duration);
  CHECK(queue_error(R"({"backoff": {"schedule": ["5s", "5 sex"]}})") ==
        "/queues/q/backoff/schedule/1: " + bad_duration);
  CHECK(queue_error(R"({"job_timeout": "5 sex"})") == "/queues/q/job_timeout: " + bad_duration);
  CHECK(queue_error(R"({"poll_interval": "5 sex"})") == "/queues/q/poll_interval: " + bad_duration);
}

TEST_CASE("config: out-of-range values name their path") {
  CHECK(queue_error(R"({"concurrency": 0})") == "/queues/q/concurrency: must be between 1 and 256 (got 0)");
  CHECK(queue_error(R"({"concurrency": 257})") == "/queues/q/concurrency: must be between 1 and 256 (got 257)");
  CHECK(queue_error(R"({"concurrency": -1})") == "/queues/q/concurrency: must be between 1 and 256 (got -1)");
  CHECK(queue_error(R"({"concurrency": 18446744073709551615})") ==
        "/queues/q/concurrency: must be between 1 and 256 (got 18446744073709551615)");
  CHECK(queue_error(R"({"concurrency": 4294967297})") ==
        "/queues/q/concurrency: must be between 1 and 256 (got 4294967297)");
  CHECK(queue_error(R"({"batch_size": 0})") == "/queues/q/batch_size: must be between 1 and 1000 (got 0)");
  CHECK(queue_error(R"({"batch_size": 1001})") == "/queues/q/batch_size: must be between 1 and 1000 (got 1001)");
  CHECK(queue_error(R"({"max_attempts": 0})") == "/queues/q/max_attempts: must be between 1 and 1000 (got 0)");
  CHECK(queue_error(R"({"max_attempts": 1001})") == "/queues/q/max_attempts: must be between 1 and 1000 (got 1001)");
  CHECK(queue_error(R"({"rate_limit_per_sec": -0.5})") ==
        "/queues/q/rate_limit_per_sec: must be 0 (unlimited) or between 0.001 and 1000000 (got -0.5)");
  CHECK(queue_error(R"({"job_timeout": "999ms"})") == "/queues/q/job_timeout: must be between 1s and 24h (got 999ms)");
  CHECK(queue_error(R"({"poll_interval": "9ms"})") == "/queues/q/poll_interval: must be between 10ms and 1h (got 9ms)");
}

TEST_CASE("config: the range limits themselves are accepted") {
  const Config config = Config::parse(nlohmann::json::parse(R"({"queues": {"q": {
      "concurrency": 256, "batch_size": 1000, "max_attempts": 1000, "rate_limit_per_sec": 0.5,
      "job_timeout": "1s", "poll_interval": "10ms", "backoff": {"base": "0s", "cap": "0s", "jitter": "none"}}}})"));
  const auto& queue = config.queues.at("q");
  CHECK(queue.concurrency == 256);
  CHECK(queue.batch_size == 1000);
  CHECK(queue.max_attempts == 1000);
  CHECK(queue.rate_limit_per_sec == 0.5);
  CHECK(queue.job_timeout == 1s);
  CHECK(queue.poll_interval == 10ms);
  CHECK(queue.backoff.base == 0ms);
  CHECK(queue.backoff.jitter == BackoffConfig::Jitter::none);
  CHECK(Config::parse(
            nlohmann::json::parse(R"({"queues": {"q": {"concurrency": 1, "batch_size": 1, "max_attempts": 1}}})"))
            .queues.at("q")
            .batch_size == 1);
}

TEST_CASE("config: backoff is either exponential or a schedule") {
  for (const char* key : {"base", "cap", "jitter"}) {
    CAPTURE(key);
    const std::string value = std::string(key) == "jitter" ? R"("none")" : R"("1s")";
    CHECK(queue_error(std::string(R"({"backoff": {"schedule": ["5s"], ")") + key + R"(": )" + value + "}}") ==
          "/queues/q/backoff/schedule: cannot be combined with base, cap or jitter");
  }
  CHECK(queue_error(R"({"backoff": {"schedule": []}})") ==
        "/queues/q/backoff/schedule: must be a non-empty array of durations");
  CHECK(queue_error(R"({"backoff": {"jitter": "half"}})") ==
        R"(/queues/q/backoff/jitter: must be "full", "equal" or "none" (got "half"))");
  const auto jitter_of = [](const char* name) {
    return Config::parse(
               nlohmann::json::parse(std::string(R"({"queues": {"q": {"backoff": {"jitter": ")") + name + R"("}}}})"))
        .queues.at("q")
        .backoff.jitter;
  };
  CHECK(jitter_of("full") == BackoffConfig::Jitter::full);
  CHECK(jitter_of("equal") == BackoffConfig::Jitter::equal);
  CHECK(jitter_of("none") == BackoffConfig::Jitter::none);
}

TEST_CASE("config: queues replace the default queue and need at least one") {
  const Config config = Config::parse(nlohmann::json::parse(R"({"queues": {"mail": {}}})"));
  REQUIRE(config.queues.size() == 1);
  CHECK(config.queues.count("mail") == 1);
  CHECK(parse_error(R"({"queues": {}})") == "/queues: at least one queue is required");
  CHECK(parse_error(R"({"queues": {"": {}}})") == "/queues/: queue name must not be empty");
  const std::string longest(128, 'q');
  CHECK(Config::parse(nlohmann::json{{"queues", {{longest, nlohmann::json::object()}}}}).queues.count(longest) == 1);
  const std::string too_long(129, 'q');
  CHECK(parse_error(nlohmann::json{{"queues", {{too_long, nlohmann::json::object()}}}}.dump()) ==
        "/queues/" + too_long + ": queue name is longer than 128 bytes");
}

TEST_CASE("config: errors stay on one line when keys or values hold line breaks") {
  CHECK(parse_error(R"({"queues": {"a\nb": {"x\u0001": 1}}})") == R"(/queues/a\nb/x\u0001: unknown key)");
  const std::string message = queue_error(R"({"job_timeout": "5\ns"})");
  CHECK(message.find('\n') == std::string::npos);
  CHECK(message.find(R"('5\ns')") != std::string::npos);
}

TEST_CASE("config: load reads the file and takes DATABASE_URL and ONCELY_SCHEMA") {
  const TempFile file(kSpecExample);
  SUBCASE("from the environment") {
    const ScopedEnv url("DATABASE_URL", "postgresql://app@db/jobs");
    const ScopedEnv schema("ONCELY_SCHEMA", "app_jobs");
    const Config config = Config::load(file.path());
    CHECK(config.queues.at("critical").concurrency == 4);
    CHECK(config.handlers.at("send_email").at("type") == "exec");
    CHECK(config.database_url == "postgresql://app@db/jobs");
    CHECK(config.schema == "app_jobs");
  }
  SUBCASE("unset or empty variables keep the defaults") {
    const ScopedEnv url("DATABASE_URL", nullptr);
    const ScopedEnv schema("ONCELY_SCHEMA", "");
    const Config config = Config::load(file.path());
    CHECK(config.database_url.empty());
    CHECK(config.schema == "oncely");
  }
  SUBCASE("an invalid ONCELY_SCHEMA is rejected") {
    const ScopedEnv schema("ONCELY_SCHEMA", "Bad-Name");
    try {
      Config::load(file.path());
      FAIL("expected a ConfigError");
    } catch (const oncely::ConfigError& e) {
      CHECK(e.path() == "ONCELY_SCHEMA");
      CHECK(std::string(e.what()).starts_with("ONCELY_SCHEMA: invalid schema name 'Bad-Name'"));
    }
  }
}

TEST_CASE("config: load reports an unreadable file or invalid JSON with the file name") {
  SUBCASE("missing file") {
    const std::string path = "/nonexistent/oncely/worker.json";
    try {
      Config::load(path);
      FAIL("expected a ConfigError");
    } catch (const oncely::ConfigError& e) {
      CHECK(e.path() == path);
      CHECK(std::string(e.what()) == path + ": cannot read: No such file or directory");
    }
  }
  SUBCASE("a directory") {
    const std::string path = std::filesystem::temp_directory_path().string();
    CHECK_THROWS_WITH_AS(Config::load(path), (path + ": cannot read: Is a directory").c_str(), oncely::ConfigError);
  }
  SUBCASE("invalid JSON") {
    const TempFile file("{\n  \"queues\": {\n    \"q\": {},\n  }\n}\n");
    try {
      Config::load(file.path());
      FAIL("expected a ConfigError");
    } catch (const oncely::ConfigError& e) {
      const std::string message = e.what();
      CHECK(e.path() == file.path());
      CHECK(message.starts_with(file.path() + ": invalid JSON: "));
      CHECK(message.find("parse error at line 4") != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
  }
  SUBCASE("an empty file") {
    const TempFile file("");
    CHECK_THROWS_AS(Config::load(file.path()), oncely::ConfigError);
  }
  SUBCASE("a valid file with a bad value names the JSON path") {
    const TempFile file(R"({"queues": {"bulk": {"backof": {}}}})");
    CHECK_THROWS_WITH_AS(Config::load(file.path()), "/queues/bulk/backof: unknown key", oncely::ConfigError);
  }
}

TEST_CASE("config: prepared_statements is a boolean switch, on by default") {
  CHECK(oncely::Config::parse(nlohmann::json::object()).prepared_statements);
  CHECK_FALSE(oncely::Config::parse(nlohmann::json{{"prepared_statements", false}}).prepared_statements);
  CHECK_THROWS_WITH_AS(oncely::Config::parse(nlohmann::json{{"prepared_statements", "no"}}),
                       "/prepared_statements: must be true or false", oncely::ConfigError);
}

TEST_CASE("config: a queue name cannot contain the NOTIFY payload's separator") {
  CHECK_THROWS_WITH_AS(oncely::Config::parse(nlohmann::json::parse(R"({"queues": {"a,b": {}}})")),
                       "/queues/a,b: queue name must not contain ','", oncely::ConfigError);
}
