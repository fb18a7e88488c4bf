// A queue's limits across workers in the configuration file: the queue_limits table's
// checks (migration 22), each refused with the key's path; and how a stored policy's limits
// differ from the file's.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "support/queue_policy.hpp"

namespace {

std::optional<std::string> queue_error(const std::string& queue) {
  try {
    oncely::Config::parse(nlohmann::json::parse(R"({"queues": {"q": )" + queue + "}}"));
  } catch (const oncely::ConfigError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace

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
      {R"({})", "/queues/q/limits: give concurrency, key or both"},
      {R"({"concurrency": 0})", "/queues/q/limits/concurrency: must be between 1 and 100000 (got 0)"},
      {R"({"concurrency": "4"})", "/queues/q/limits/concurrency: must be an integer"},
      {R"({"per_key_concurrency": 1})", "/queues/q/limits/per_key_concurrency: needs a key: what a job's key is"},
      {R"({"key": "tenant_id"})",
       R"(/queues/q/limits/key: must be "concurrency_key" or a JSON pointer into the payload such as "/tenant_id" (got "tenant_id"))"},
      {R"({"key": "/a~2"})",
       R"(/queues/q/limits/key: must be "concurrency_key" or a JSON pointer into the payload such as "/tenant_id" (got "/a~2"))"},
      {R"({"key": 7})", "/queues/q/limits/key: must be a string"},
      {R"({"rate": "10/1s"})", "/queues/q/limits/rate: unknown key: one of concurrency, key, per_key_concurrency"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.limits);
    const auto error = queue_error(std::string(R"({"mode": "lease", "limits": )") + row.limits + "}");
    CHECK(error.value_or("(none)") == row.error.value_or("(none)"));
  }
  CHECK(
      queue_error(R"({"limits": {"concurrency": 4}})").value_or("(none)") ==
      R"(/queues/q/limits: apply only to a queue with "mode": "lease" (transaction-mode queues do not enforce them yet))");
}

TEST_CASE("queue limits: limits built in code are held to the file's rules") {
  oncely::Config config;
  config.queues["q"].mode = oncely::QueueConfig::Mode::lease;
  config.queues["q"].limits =
      oncely::QueueLimits{.concurrency = std::nullopt, .key = std::nullopt, .per_key_concurrency = 2};
  CHECK_THROWS_WITH_AS(config.validate(), "/queues/q/limits/per_key_concurrency: needs a key: what a job's key is",
                       oncely::ConfigError);
}

TEST_CASE("queue limits: a stored policy whose limits are not the file's differs in limits") {
  oncely::QueueConfig stored;
  stored.mode = oncely::QueueConfig::Mode::lease;
  oncely::QueueConfig wanted = stored;
  CHECK(oncely::detail::policy_differences(stored, wanted).empty());
  wanted.limits = oncely::QueueLimits{.concurrency = 4, .key = std::nullopt, .per_key_concurrency = std::nullopt};
  CHECK(oncely::detail::policy_differences(stored, wanted) == std::vector<std::string>{"limits"});
  stored.limits = wanted.limits;
  CHECK(oncely::detail::policy_differences(stored, wanted).empty());
  stored.limits->key = "/tenant";
  CHECK(oncely::detail::policy_differences(stored, wanted) == std::vector<std::string>{"limits"});
}
