#include <doctest/doctest.h>

#include "oncely/stats.hpp"

using oncely::CheckStatus;

namespace {

oncely::QueueStats queue(const std::string& name) {
  oncely::QueueStats q;
  q.queue = name;
  return q;
}

}  // namespace

TEST_CASE("check: the defaults: more than 10 dead letters is critical, 10 is fine") {
  oncely::Stats stats;
  stats.queues = {queue("payments"), queue("email")};
  stats.queues[0].dead_letters = 11;
  stats.queues[1].dead_letters = 10;
  const auto findings = oncely::check(stats, {});
  REQUIRE(findings.size() == 1);
  CHECK(findings[0].status == CheckStatus::critical);
  CHECK(findings[0].message == "CRITICAL: queue payments has 11 dead letters (> 10)");
}

TEST_CASE("check: failure rate above 1 % warns, but only with enough attempts to judge") {
  oncely::Stats stats;
  stats.queues = {queue("a"), queue("b")};
  stats.queues[0].attempts_5m = 200;
  stats.queues[0].failure_rate_5m = 0.025;
  stats.queues[1].attempts_5m = 3;  // 1 of 3 failed: too few to call it a trend
  stats.queues[1].failure_rate_5m = 0.33;
  const auto findings = oncely::check(stats, {});
  REQUIRE(findings.size() == 1);
  CHECK(findings[0].status == CheckStatus::warning);
  CHECK(findings[0].message == "WARNING: queue a failure rate 2.5 % over the last 5 minutes (> 1.0 %)");
}

TEST_CASE("check: backlog age and dead-letter growth, worst finding first") {
  oncely::Stats stats;
  stats.queues = {queue("bulk"), queue("critical")};
  stats.queues[0].oldest_ready_age_s = 900;
  stats.queues[1].dead_letters_per_minute_15m = 2.0;
  oncely::CheckThresholds t;
  t.max_age_critical_s = 3600;
  t.dead_letter_growth_critical = 1.0;
  const auto findings = oncely::check(stats, t);
  REQUIRE(findings.size() == 2);
  CHECK(findings[0].message ==
        "CRITICAL: queue critical dead letters growing at 2.00/min over 15 minutes (> 1.00/min)");
  CHECK(findings[1].message == "WARNING: queue bulk oldest ready job has waited 15m (> 5m)");
}

TEST_CASE("check: nothing crossed, nothing found; unset thresholds are not checked") {
  oncely::Stats stats;
  stats.queues = {queue("a")};
  stats.queues[0].dead_letters = 500;
  oncely::CheckThresholds t;
  t.dead_letters_critical.reset();
  CHECK(oncely::check(stats, t).empty());
}
