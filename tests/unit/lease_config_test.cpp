// Lease mode's configuration: its keys, ranges and connection count, as a table; and a lease
// queue's limits across workers, which are the queue_limits table's checks (migrations 22 and 23).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "support/queue_policy.hpp"

namespace {

// The ConfigError a queue object gives, or nothing when it parses.
std::optional<std::string> queue_error(const std::string& queue) {
  try {
    oncely::Config::parse(nlohmann::json::parse(R"({"queues": {"q": )" + queue + "}}"));
  } catch (const oncely::ConfigError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("lease config: mode and lease are checked as strictly as every other key") {
  struct Row {
    const char* queue;
    std::optional<std::string> error;
  };
  const Row rows[] = {
      {R"({"mode": "lease"})", std::nullopt},
      {R"({"mode": "transaction"})", std::nullopt},
      {R"({"mode": "Lease"})", R"(/queues/q/mode: must be "transaction" or "lease" (got "Lease"))"},
      {R"({"mode": 1})", R"(/queues/q/mode: must be "transaction" or "lease" (got 1))"},
      {R"({"mode": "lease", "lease": "3s"})", std::nullopt},
      {R"({"mode": "lease", "lease": "1h"})", std::nullopt},
      {R"({"mode": "lease", "lease": "2999ms"})", "/queues/q/lease: must be between 3s and 1h (got 2999ms)"},
      {R"({"mode": "lease", "lease": "61m"})", "/queues/q/lease: must be between 3s and 1h (got 61m)"},
      {R"({"mode": "lease", "lease": "soon"})", std::nullopt},  // placeholder, replaced below
      {R"({"lease": "30s"})", R"(/queues/q/lease: applies only to a queue with "mode": "lease")"},
      {R"({"mode": "transaction", "lease": "30s"})",
       R"(/queues/q/lease: applies only to a queue with "mode": "lease")"},
      // Lease mode: hours-long attempts and many jobs at once (they hold no connection).
      {R"({"mode": "lease", "job_timeout": "7d"})", std::nullopt},
      {R"({"mode": "lease", "job_timeout": "169h"})", "/queues/q/job_timeout: must be between 1s and 7d (got 169h)"},
      {R"({"job_timeout": "25h"})", "/queues/q/job_timeout: must be between 1s and 24h (got 25h)"},
      {R"({"mode": "lease", "concurrency": 2000})", std::nullopt},
      {R"({"mode": "lease", "concurrency": 2001})", "/queues/q/concurrency: must be between 1 and 2000 (got 2001)"},
      {R"({"concurrency": 257})", "/queues/q/concurrency: must be between 1 and 256 (got 257)"},
      // More connections for short lease jobs; each runs a share of the handlers.
      {R"({"mode": "lease", "connections": 16, "concurrency": 16})", std::nullopt},
      {R"({"mode": "lease", "connections": 17, "concurrency": 100})",
       "/queues/q/connections: must be between 1 and 16 (got 17)"},
      {R"({"mode": "lease", "connections": 0})", "/queues/q/connections: must be between 1 and 16 (got 0)"},
      {R"({"mode": "lease", "connections": 5, "concurrency": 4})",
       "/queues/q/connections: must not exceed the queue's concurrency (4): each connection runs a share of its "
       "handlers"},
      {R"({"connections": 2})",
       R"(/queues/q/connections: applies only to a queue with "mode": "lease" (a transaction queue has one connection per worker thread: its concurrency))"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.queue);
    const auto error = queue_error(row.queue);
    if (std::string(row.queue).find("soon") != std::string::npos) {
      REQUIRE(error.has_value());
      CHECK(error->starts_with("/queues/q/lease: "));
      continue;
    }
    CHECK(error.value_or("(none)") == row.error.value_or("(none)"));
  }
}

TEST_CASE("lease config: a lease queue needs its connections, whatever its concurrency") {
  const auto needed = [](const std::string& queues) {
    return oncely::Config::parse(nlohmann::json::parse(R"({"queues": )" + queues + "}")).connections_needed();
  };
  CHECK(needed(R"({"q": {"concurrency": 4}})") == 2 + 8);
  // Its control thread's connection, plus one for the process's lease renewals.
  CHECK(needed(R"({"q": {"mode": "lease", "concurrency": 1000}})") == 2 + 1 + 1);
  CHECK(needed(R"({"a": {"mode": "lease", "concurrency": 1000}, "b": {"mode": "lease"}, "c": {"concurrency": 2}})") ==
        2 + 1 + 1 + 4 + 1);
  CHECK(needed(R"({"q": {"mode": "lease", "concurrency": 1000, "connections": 4}})") == 2 + 4 + 1);
}

TEST_CASE("queue limits: what the file accepts is what the queue_limits table stores") {
  struct Row {
    const char* limits;
    std::optional<std::string> error;
  };
  const Row rows[] = {
      {R"({"concurrency": 4})", std::nullopt},
      {R"({"key": "/tenant_id"})", std::nullopt},
      {R"({"key": "concurrency_key", "per_key_concurrency": 1})", std::nullopt},
      {R"({"concurrency": 100000, "key": "/a~1b/~0c", "per_key_concurrency": 100000})", std::nullopt},
      {R"({"rate": "20/1s"})", std::nullopt},
      {R"({"rate": "10000/24h", "key": "/t", "per_key_rate": "1/1ms"})", std::nullopt},
      {R"({})", "/queues/q/limits: give concurrency, rate, key or more"},
      {R"({"concurrency": 0})", "/queues/q/limits/concurrency: must be between 1 and 100000 (got 0)"},
      {R"({"concurrency": "4"})", "/queues/q/limits/concurrency: must be an integer"},
      {R"({"per_key_concurrency": 1})", "/queues/q/limits/per_key_concurrency: needs a key: what a job's key is"},
      {R"({"key": "tenant_id"})",
       R"(/queues/q/limits/key: must be "concurrency_key" or a JSON pointer into the payload such as "/tenant_id" (got "tenant_id"))"},
      {R"({"key": "/a~2"})",
       R"(/queues/q/limits/key: must be "concurrency_key" or a JSON pointer into the payload such as "/tenant_id" (got "/a~2"))"},
      {R"({"key": 7})", "/queues/q/limits/key: must be a string"},
      {R"({"rate": "0/0s"})", R"(/queues/q/limits/rate: its count must be between 1 and 10000 (got "0/0s"))"},
      {R"({"rate": "20/0s"})", R"(/queues/q/limits/rate: its period must be between 1ms and 24h (got "20/0s"))"},
      {R"({"rate": "20/25h"})", R"(/queues/q/limits/rate: its period must be between 1ms and 24h (got "20/25h"))"},
      {R"({"rate": "10001/1s"})", R"(/queues/q/limits/rate: its count must be between 1 and 10000 (got "10001/1s"))"},
      {R"({"rate": "20 per second"})",
       R"(/queues/q/limits/rate: must be "count/period" such as "20/1s" (got "20 per second"))"},
      {R"({"rate": "/1s"})", R"(/queues/q/limits/rate: must be "count/period" such as "20/1s" (got "/1s"))"},
      {R"({"rate": "-5/1s"})", R"(/queues/q/limits/rate: must be "count/period" such as "20/1s" (got "-5/1s"))"},
      {R"({"rate": "5/1 s"})", R"(/queues/q/limits/rate: must be "count/period" such as "20/1s" (got "5/1 s"))"},
      {R"({"rate": 20})", R"(/queues/q/limits/rate: must be "count/period" such as "20/1s" (got 20))"},
      {R"({"per_key_rate": "5/1s"})", "/queues/q/limits/per_key_rate: needs a key: what a job's key is"},
      {R"({"burst": 5})",
       "/queues/q/limits/burst: unknown key: one of concurrency, key, per_key_concurrency, rate, per_key_rate"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.limits);
    const auto error = queue_error(std::string(R"({"mode": "lease", "limits": )") + row.limits + "}");
    CHECK(error.value_or("(none)") == row.error.value_or("(none)"));
  }
  // A transaction-mode queue takes every limit but the rates.
  CHECK_FALSE(queue_error(R"({"limits": {"concurrency": 4, "key": "/t", "per_key_concurrency": 1}})"));
  CHECK(queue_error(R"({"limits": {"rate": "5/1s"}})").value_or("(none)") ==
        R"(/queues/q/limits/rate: applies only to a queue with "mode": "lease")");
  CHECK(queue_error(R"({"limits": {"key": "/t", "per_key_rate": "5/1s"}})").value_or("(none)") ==
        R"(/queues/q/limits/per_key_rate: applies only to a queue with "mode": "lease")");
}

TEST_CASE("queue limits: limits built in code are held to the file's rules") {
  oncely::Config config;
  config.queues["q"].mode = oncely::QueueConfig::Mode::lease;
  config.queues["q"].limits = oncely::QueueLimits{.concurrency = std::nullopt,
                                                  .key = std::nullopt,
                                                  .per_key_concurrency = 2,
                                                  .rate = std::nullopt,
                                                  .per_key_rate = std::nullopt};
  CHECK_THROWS_WITH_AS(config.validate(), "/queues/q/limits/per_key_concurrency: needs a key: what a job's key is",
                       oncely::ConfigError);
}

TEST_CASE("queue limits: a stored policy whose limits are not the file's differs in limits") {
  oncely::QueueConfig stored;
  stored.mode = oncely::QueueConfig::Mode::lease;
  oncely::QueueConfig wanted = stored;
  CHECK(oncely::detail::policy_differences(stored, wanted).empty());
  wanted.limits = oncely::QueueLimits{.concurrency = 4,
                                      .key = std::nullopt,
                                      .per_key_concurrency = std::nullopt,
                                      .rate = std::nullopt,
                                      .per_key_rate = std::nullopt};
  CHECK(oncely::detail::policy_differences(stored, wanted) == std::vector<std::string>{"limits"});
  stored.limits = wanted.limits;
  CHECK(oncely::detail::policy_differences(stored, wanted).empty());
  stored.limits->key = "/tenant";
  CHECK(oncely::detail::policy_differences(stored, wanted) == std::vector<std::string>{"limits"});
}
