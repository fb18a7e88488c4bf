// The "cron" object of the worker configuration, and the scheduler's pure decision
// (cron::plan): what is enqueued for a new entry, after downtime by catch_up, and after the
// schedule changed.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "oncely/config.hpp"
#include "scheduling/cron_plan.hpp"
#include "support/config_errors.hpp"

using oncely::Config;
using oncely::CronEntry;
using oncely::test::parse_error;
namespace cron = oncely::detail::cron;
using namespace std::chrono_literals;

namespace {

std::string cron_error(const std::string& entry_json) {
  return parse_error(R"({"cron": {"nightly": )" + entry_json + "}}");
}

cron::Instant at(int hour, int minute, int second = 0) {
  const auto day = std::chrono::sys_days{std::chrono::year{2026} / 12 / 1};
  return cron::Instant{day.time_since_epoch() + std::chrono::hours(hour) + std::chrono::minutes(minute) +
                       std::chrono::seconds(second)};
}

cron::CompiledEntry entry(const std::string& schedule, CronEntry::CatchUp catch_up) {
  CronEntry e;
  e.schedule = schedule;
  e.kind = "report";
  e.catch_up = catch_up;
  return cron::compile("nightly", e);
}

std::vector<std::string> formatted(const std::vector<cron::Instant>& slots) {
  std::vector<std::string> out;
  for (const auto t : slots) out.push_back(cron::format_utc(t));
  return out;
}

}  // namespace

TEST_CASE("cron config: an entry with every key, and the defaults") {
  const Config config = Config::parse(nlohmann::json::parse(R"({"cron": {
    "nightly": {"schedule": "0 3 * * *", "time_zone": "Europe/Berlin", "kind": "report", "queue": "reports",
                "payload": {"full": true}, "priority": -5, "max_attempts": 3, "catch_up": "all"},
    "tick": {"schedule": "@every 30s", "kind": "tick"}}})"));
  REQUIRE(config.cron.size() == 2);
  const CronEntry& n = config.cron.at("nightly");
  CHECK(n.schedule == "0 3 * * *");
  CHECK(n.time_zone == "Europe/Berlin");
  CHECK(n.queue == "reports");
  CHECK(n.payload == nlohmann::json{{"full", true}});
  CHECK(n.priority == -5);
  CHECK(n.max_attempts == 3);
  CHECK(n.catch_up == CronEntry::CatchUp::all);
  const CronEntry& t = config.cron.at("tick");
  CHECK(t.time_zone == "UTC");
  CHECK(t.queue == "default");
  CHECK(t.payload == nlohmann::json::object());
  CHECK(t.priority == 0);
  CHECK_FALSE(t.max_attempts);
  CHECK(t.catch_up == CronEntry::CatchUp::latest);
  // The scheduler's own connection.
  CHECK(config.connections_needed() == Config::parse(nlohmann::json::object()).connections_needed() + 1);
}

TEST_CASE("cron config: bad entries name their path, on one line") {
  CHECK(cron_error(R"({"schedule": "0 24 * * *", "kind": "k"})") ==
        "/cron/nightly/schedule: hour field \"24\": 24 is out of range 0-23");
  CHECK(cron_error(R"({"schedule": "0 3 * *", "kind": "k"})") ==
        "/cron/nightly/schedule: expected 5 fields (minute hour day-of-month month day-of-week), got 4 in \"0 3 * *\"");
  CHECK(cron_error(R"({"schedule": "0 3 * * *", "kind": "k", "time_zone": "Europe/Berln"})") ==
        "/cron/nightly/time_zone: unknown time zone \"Europe/Berln\" (not in the system's tz database)");
  CHECK(cron_error(R"({"kind": "k"})") == "/cron/nightly/schedule: is required");
  CHECK(cron_error(R"({"schedule": "@daily"})") == "/cron/nightly/kind: is required");
  CHECK(cron_error(R"({"schedule": "@daily", "kind": ""})") == "/cron/nightly/kind: kind must not be empty");
  CHECK(cron_error(R"({"schedule": "@daily", "kind": "k", "catch_up": "some"})") ==
        "/cron/nightly/catch_up: must be \"none\", \"latest\" or \"all\" (got \"some\")");
  CHECK(cron_error(R"({"schedule": "@daily", "kind": "k", "shedule": "x"})") == "/cron/nightly/shedule: unknown key");
  CHECK(cron_error(R"({"schedule": "@daily", "kind": "k", "priority": 40000})") ==
        "/cron/nightly/priority: must be between -32768 and 32767 (got 40000)");
  CHECK(cron_error(R"({"schedule": "@daily", "kind": "k", "max_attempts": 0})") ==
        "/cron/nightly/max_attempts: must be between 1 and 1000 (got 0)");
  CHECK(cron_error(R"({"schedule": "@daily", "kind": "k", "payload": [1]})") ==
        "/cron/nightly/payload: must be an object");
  CHECK(cron_error(R"({"schedule": "@daily", "kind": "k", "queue": "a,b"})") ==
        "/cron/nightly/queue: queue name must not contain ','");
  CHECK(cron_error(R"({"schedule": 5, "kind": "k"})") == "/cron/nightly/schedule: must be a string");
  CHECK(cron_error(R"("0 3 * * *")") == "/cron/nightly: must be an object");
  CHECK(parse_error(R"({"cron": []})") == "/cron: must be an object");
  CHECK(parse_error(R"({"cron": {"": {"schedule": "@daily", "kind": "k"}}})") ==
        "/cron/: the entry's name must not be empty");
}

TEST_CASE("cron config: a Config built in code is validated too") {
  Config config;
  CronEntry e;
  e.schedule = "@every 1ms";
  e.kind = "k";
  config.cron.emplace("fast", e);
  CHECK_THROWS_WITH_AS(config.validate(),
                       "/cron/fast/schedule: @every: the interval must be between 100ms and 24h (got 1ms)",
                       oncely::ConfigError);
}

TEST_CASE("cron plan: a new entry starts at now, nothing caught up") {
  const auto e = entry("0 * * * *", CronEntry::CatchUp::all);
  const auto p = cron::plan(e, {}, at(10, 20));
  CHECK(p.write);
  CHECK(p.enqueue.empty());
  CHECK(p.covered_until == at(10, 20));
  CHECK(cron::format_utc(*p.next_slot) == "2026-12-01T11:00:00Z");
}

TEST_CASE("cron plan: nothing is written while no slot is due") {
  const auto e = entry("0 * * * *", CronEntry::CatchUp::latest);
  const auto p = cron::plan(e, {at(10, 0, 1), e.fingerprint}, at(10, 59, 59));
  CHECK_FALSE(p.write);
  CHECK(p.enqueue.empty());
  // Another worker already ahead of our clock.
  CHECK_FALSE(cron::plan(e, {at(11, 0, 1), e.fingerprint}, at(11, 0, 0)).write);
}

TEST_CASE("cron plan: on time, every catch_up enqueues the slot") {
  for (const auto mode : {CronEntry::CatchUp::none, CronEntry::CatchUp::latest, CronEntry::CatchUp::all}) {
    const auto e = entry("0 * * * *", mode);
    const auto p = cron::plan(e, {at(10, 0, 1), e.fingerprint}, at(11, 0, 0));
    CHECK(p.write);
    CHECK(formatted(p.enqueue) == std::vector<std::string>{"2026-12-01T11:00:00Z"});
    CHECK_FALSE(p.skipped);
    CHECK(p.covered_until == at(11, 0));
  }
}

TEST_CASE("cron plan: after downtime, by catch_up") {
  // Last covered 06:30, back at 10:20: slots 07:00, 08:00, 09:00, 10:00 were missed.
  const cron::SlotRow row{at(6, 30), ""};
  const auto none = entry("0 * * * *", CronEntry::CatchUp::none);
  auto p = cron::plan(none, {row.covered_until, none.fingerprint}, at(10, 20));
  CHECK(p.write);
  CHECK(p.enqueue.empty());  // 10:00 is 20 minutes late
  CHECK(p.skipped);
  // Within kOnTime of the slot, none still runs it.
  p = cron::plan(none, {row.covered_until, none.fingerprint}, at(10, 0, 30));
  CHECK(formatted(p.enqueue) == std::vector<std::string>{"2026-12-01T10:00:00Z"});

  const auto latest = entry("0 * * * *", CronEntry::CatchUp::latest);
  p = cron::plan(latest, {row.covered_until, latest.fingerprint}, at(10, 20));
  CHECK(formatted(p.enqueue) == std::vector<std::string>{"2026-12-01T10:00:00Z"});
  CHECK(p.skipped);

  const auto all = entry("0 * * * *", CronEntry::CatchUp::all);
  p = cron::plan(all, {row.covered_until, all.fingerprint}, at(10, 20));
  CHECK(formatted(p.enqueue) == std::vector<std::string>{"2026-12-01T07:00:00Z", "2026-12-01T08:00:00Z",
                                                         "2026-12-01T09:00:00Z", "2026-12-01T10:00:00Z"});
  CHECK(p.covered_until == at(10, 20));
}

TEST_CASE("cron plan: catch_up all is bounded by 100 slots and 24 hours") {
  const auto minutely = entry("* * * * *", CronEntry::CatchUp::all);
  auto p = cron::plan(minutely, {at(6, 0), minutely.fingerprint}, at(10, 0));
  REQUIRE(p.enqueue.size() == 100);
  CHECK(cron::format_utc(p.enqueue.front()) == "2026-12-01T08:21:00Z");
  CHECK(cron::format_utc(p.enqueue.back()) == "2026-12-01T10:00:00Z");
  const auto hourly = entry("0 * * * *", CronEntry::CatchUp::all);
  p = cron::plan(hourly, {at(10, 0) - std::chrono::hours(72), hourly.fingerprint}, at(10, 0));
  CHECK(p.enqueue.size() == 24);  // (10:00 yesterday, 10:00 today]
  CHECK(cron::format_utc(p.enqueue.front()) == "2026-11-30T11:00:00Z");
}

TEST_CASE("cron plan: a changed schedule does not catch up what it never had") {
  // Was "0 3 * * *", now "0 4 * * *"; deployed at 12:00 after 03:00 ran.
  const auto changed = entry("0 4 * * *", CronEntry::CatchUp::all);
  auto p = cron::plan(changed, {at(3, 0, 1), "0 3 * * * UTC"}, at(12, 0));
  CHECK(p.write);  // records the new schedule
  CHECK(p.enqueue.empty());
  // Deployed just after the new schedule's slot: on time, it runs.
  p = cron::plan(changed, {at(3, 0, 1), "0 3 * * * UTC"}, at(4, 0, 10));
  CHECK(formatted(p.enqueue) == std::vector<std::string>{"2026-12-01T04:00:00Z"});
}

TEST_CASE("cron plan: job keys") {
  CHECK(cron::job_key("nightly", at(3, 0)) == "cron:nightly:2026-12-01T03:00:00Z");
  CHECK(cron::job_key("fast", at(3, 0) + 200ms) == "cron:fast:2026-12-01T03:00:00.200Z");
}
