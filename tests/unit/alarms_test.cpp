// Per-queue alarms: their parse and defaults, check() with thresholds per queue, and the
// Prometheus rules `oncely alert-rules` prints for them (promtool runs them in
// tests/alert_rules.sh).
#include <doctest/doctest.h>

#include <string>

#include "oncely/alert_rules.hpp"
#include "oncely/config.hpp"
#include "oncely/stats.hpp"
#include "support/config_errors.hpp"
#include "support/parsed_cli.hpp"
#include "support/temp_dir.hpp"

using namespace oncely;
using namespace std::chrono_literals;
using oncely::test::parse_error;

TEST_CASE("alarms: the defaults are the usual starting points") {
  const AlarmConfig a = Config::parse(nlohmann::json::parse(R"({"queues": {"q": {}}})")).queues.at("q").alarms;
  CHECK(a.dead_letters_warning == 5);
  CHECK(a.dead_letters_critical == 10);
  CHECK(a.failure_rate_warning == 1);
  CHECK(a.failure_rate_critical == 5);
  CHECK(a.max_age_warning == std::chrono::milliseconds(5min));
  CHECK(a.max_age_critical == std::chrono::milliseconds(30min));
  CHECK(a.dead_letter_growth_warning == 1);
  CHECK_FALSE(a.dead_letter_growth_critical);
}

TEST_CASE("alarms: set, turned off with null, and refused when they make no sense") {
  const AlarmConfig a = Config::parse(nlohmann::json::parse(
                                          R"({"queues": {"q": {"alarms": {"dead_letters_critical": null,
                                              "failure_rate_warning": 2.5, "max_age_warning": "1m"}}}})"))
                            .queues.at("q")
                            .alarms;
  CHECK_FALSE(a.dead_letters_critical);
  CHECK(a.failure_rate_warning == 2.5);
  CHECK(a.max_age_warning == std::chrono::milliseconds(1min));
  CHECK(parse_error(R"({"queues": {"q": {"alarms": {"dead_leters_warning": 1}}}})") ==
        "/queues/q/alarms/dead_leters_warning: unknown key");
  CHECK(parse_error(R"({"queues": {"q": {"alarms": {"failure_rate_critical": 101}}}})") ==
        "/queues/q/alarms/failure_rate_critical: must be between 0 and 100 (got 101)");
  CHECK(parse_error(R"({"queues": {"q": {"alarms": {"max_age_warning": "45m"}}}})") ==
        "/queues/q/alarms/max_age_warning: must not be above max_age_critical");
  CHECK(parse_error(R"({"queues": {"q": {"alarms": {"dead_letters_warning": -1}}}})") ==
        "/queues/q/alarms/dead_letters_warning: must be between 0 and 1000000000 (got -1)");
  CHECK(parse_error(R"({"queues": {"q": {"alarms": {"max_age_warning": "0s"}}}})") ==
        "/queues/q/alarms/max_age_warning: must be between 1s and 30d (got 0ms)");
}

TEST_CASE("alarms: check() judges each queue by its own thresholds") {
  Stats stats;
  for (const char* name : {"strict", "lenient"}) {
    QueueStats q;
    q.queue = name;
    q.dead_letters = 3;
    stats.queues.push_back(q);
  }
  AlarmConfig strict;
  strict.dead_letters_warning = 0;
  strict.dead_letters_critical = 2;
  const auto findings = check_per_queue(
      stats, [&](const std::string& queue) { return thresholds_of(queue == "strict" ? strict : AlarmConfig{}); });
  REQUIRE(findings.size() == 1);
  CHECK(findings[0].status == CheckStatus::critical);
  CHECK(findings[0].message == "CRITICAL: queue strict has 3 dead letters (> 2)");
}

TEST_CASE("alarms: as check thresholds, rates become fractions and ages seconds") {
  const CheckThresholds t = thresholds_of(AlarmConfig{});
  CHECK(t.failure_rate_warning == doctest::Approx(0.01));
  CHECK(t.failure_rate_critical == doctest::Approx(0.05));
  CHECK(t.max_age_warning_s == doctest::Approx(300));
  CHECK(t.max_age_critical_s == doctest::Approx(1800));
}

TEST_CASE("alert rules: per queue and severity, with the queue's own thresholds, escaped") {
  const Config config = Config::parse(nlohmann::json::parse(
      R"({"queues": {"pay\"ments": {"alarms": {"dead_letters_critical": 3, "dead_letters_warning": null}}, "bulk": {}}})"));
  const std::string rules =
      prometheus_alert_rules(config, {.runbook_base = "https://wiki/oncely", .for_duration = "2m"});
  INFO(rules);
  // The queue name's quote is escaped for PromQL, then for the YAML double-quoted scalar.
  CHECK(rules.find(R"(expr: "max by (queue) (oncely_dead_letters{queue=\"pay\\\"ments\"}) > 3")") != std::string::npos);
  CHECK(rules.find(R"(expr: "max by (queue) (oncely_dead_letters{queue=\"bulk\"}) > 10")") != std::string::npos);
  CHECK(rules.find(R"(expr: "max by (queue) (oncely_dead_letters{queue=\"bulk\"}) > 5")") != std::string::npos);
  CHECK(rules.find("oncely_dead_letters{queue=\\\"pay\\\\\\\"ments\\\"}) > 5") == std::string::npos);  // turned off
  CHECK(rules.find("severity: critical") != std::string::npos);
  CHECK(rules.find("severity: warning") != std::string::npos);
  CHECK(rules.find("for: 2m") != std::string::npos);
  CHECK(rules.find(R"(runbook: "https://wiki/oncely#runbook-a-queue-is-failing")") != std::string::npos);
}

TEST_CASE("alert-rules: the command needs no database and prints the file's rules") {
  oncely::test::TempDir dir;
  const std::string config = dir.write("w.json", R"({"queues": {"mail": {}}})", 0644);
  oncely::test::ParsedCli cli({"--database-url", "", "alert-rules", "--config", config.c_str()});
  REQUIRE_FALSE(cli.exit);
  CHECK(cli.dispatch() == 0);
  CHECK(cli.out.str().starts_with("# Generated by `oncely alert-rules`"));
  CHECK(cli.out.str().find(R"(queue: "mail")") != std::string::npos);

  oncely::test::ParsedCli bad({"alert-rules", "--config", config.c_str(), "--for", "soon"});
  REQUIRE_FALSE(bad.exit);
  CHECK(bad.dispatch() == 2);
  CHECK(bad.err.str().starts_with("oncely: error: --for: "));
}
