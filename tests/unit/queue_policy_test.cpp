// Which policy keys a stored row and a worker's file differ in (the worker logs them once).
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "support/queue_policy.hpp"

using oncely::QueueConfig;
using oncely::detail::policy_differences;
using namespace std::chrono_literals;

TEST_CASE("queue policy: the keys a stored policy and the file differ in") {
  struct Case {
    const char* what;
    std::function<void(QueueConfig& stored, QueueConfig& wanted)> change;
    std::vector<std::string> keys;
  };
  const std::vector<Case> cases{
      {"the same", [](QueueConfig&, QueueConfig&) {}, {}},
      {"mode", [](QueueConfig&, QueueConfig& w) { w.mode = QueueConfig::Mode::lease; }, {"mode"}},
      {"a transaction queue's lease is not used", [](QueueConfig& s, QueueConfig&) { s.lease = 10s; }, {}},
      {"a lease queue's lease",
       [](QueueConfig& s, QueueConfig& w) {
         s.mode = w.mode = QueueConfig::Mode::lease;
         s.lease = 10s;
       },
       {"lease"}},
      {"attempts and timeout",
       [](QueueConfig&, QueueConfig& w) {
         w.max_attempts = 3;
         w.job_timeout = 1min;
       },
       {"max_attempts", "job_timeout"}},
      {"backoff",
       [](QueueConfig&, QueueConfig& w) {
         w.backoff.base = 1s;
         w.backoff.jitter = oncely::BackoffConfig::Jitter::none;
       },
       {"backoff.base", "backoff.jitter"}},
      {"a schedule replaces base, cap and jitter",
       [](QueueConfig&, QueueConfig& w) {
         w.backoff.schedule = {1s, 5s};
         w.backoff.base = 1s;
       },
       {"backoff.schedule"}},
      {"the same schedule",
       [](QueueConfig& s, QueueConfig& w) {
         s.backoff.schedule = w.backoff.schedule = {1s, 5s};
       },
       {}},
      {"what is not policy (concurrency, batch size, poll interval) is not compared",
       [](QueueConfig&, QueueConfig& w) {
         w.concurrency = 32;
         w.batch_size = 10;
         w.poll_interval = 5s;
       },
       {}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    QueueConfig stored;
    QueueConfig wanted;
    c.change(stored, wanted);
    CHECK(policy_differences(stored, wanted) == c.keys);
  }
}
