// The cron module: parsing (fields, names, macros, errors naming the field) and slots in
// time zones, with the daylight-saving days of Europe/Berlin and America/New_York as tables.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "oncely/errors.hpp"
#include "support/cron_expression.hpp"

namespace cron = oncely::detail::cron;
using namespace std::chrono_literals;

namespace {

// "2026-03-29T01:00:00Z" -> Instant (UTC; whole seconds, or .mmm).
cron::Instant utc(const std::string& iso) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, ms = 0;
  const int n = std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &y, &mo, &d, &h, &mi, &s, &ms);
  REQUIRE(n >= 6);
  const auto day = std::chrono::sys_days{std::chrono::year{y} / mo / d};
  return cron::Instant{day.time_since_epoch() + std::chrono::hours(h) + std::chrono::minutes(mi) +
                       std::chrono::seconds(s) + std::chrono::milliseconds(ms)};
}

std::string next(const std::string& schedule, const std::string& zone, const std::string& after) {
  const auto found = cron::next_after(cron::parse(schedule), cron::locate_zone(zone), utc(after));
  return found ? cron::format_utc(*found) : "none";
}

// The slots in (from, to], formatted.
std::vector<std::string> slots(const std::string& schedule, const std::string& zone, const std::string& from,
                               const std::string& to) {
  std::vector<std::string> out;
  for (const auto t : cron::slots_between(cron::parse(schedule), cron::locate_zone(zone), utc(from), utc(to), 1000)) {
    out.push_back(cron::format_utc(t));
  }
  return out;
}

std::string error_of(const std::string& schedule) {
  try {
    cron::parse(schedule);
  } catch (const oncely::ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("cron: fields, lists, ranges, steps and names") {
  const auto s = cron::parse("*/15 9-17 * jan,Mar-may mon-FRI");
  CHECK(s.minutes.count() == 4);
  CHECK(s.minutes[0]);
  CHECK(s.minutes[45]);
  CHECK(s.hours.count() == 9);
  CHECK(s.months[1]);
  CHECK_FALSE(s.months[2]);
  CHECK(s.months[5]);
  CHECK(s.days_of_week.count() == 5);
  CHECK_FALSE(s.days_of_week[0]);
  CHECK(s.frequent);
  CHECK_FALSE(s.dom_restricted);
  CHECK(s.dow_restricted);

  CHECK(cron::parse("5 0 * * 7").days_of_week[0]);  // 7 is Sunday
  CHECK(cron::parse("0 0 * * 5-7").days_of_week.count() == 3);
  // "a/n" in day-of-week runs to 7, Sunday: "7/1" was left with no day at all (a fuzz
  // finding: parse() accepted a schedule that never runs), "5/1" without Sunday.
  CHECK(cron::parse("0 0-17/1 * * 7/1 ").days_of_week == cron::parse("0 0 * * 0").days_of_week);
  CHECK(cron::parse("0 0 * * 5/1").days_of_week == cron::parse("0 0 * * 5-7").days_of_week);
  CHECK(cron::parse("0 0 * * 1/2").days_of_week == cron::parse("0 0 * * 1,3,5,7").days_of_week);
  CHECK(cron::parse("10/20 * * * *").minutes.count() == 3);   // 10, 30, 50
  CHECK(cron::parse("1-10/3 * * * *").minutes.count() == 4);  // 1, 4, 7, 10
  CHECK_FALSE(cron::parse("30 2 * * *").frequent);
  CHECK(cron::parse("  0   3 * *  * ").text == "0 3 * * *");
}

TEST_CASE("cron: macros") {
  CHECK(next("@hourly", "UTC", "2026-12-01T10:20:00Z") == "2026-12-01T11:00:00Z");
  CHECK(next("@daily", "UTC", "2026-12-01T10:20:00Z") == "2026-12-02T00:00:00Z");
  CHECK(next("@midnight", "UTC", "2026-12-01T10:20:00Z") == "2026-12-02T00:00:00Z");
  CHECK(next("@weekly", "UTC", "2026-12-01T10:20:00Z") == "2026-12-06T00:00:00Z");  // a Sunday
  CHECK(next("@monthly", "UTC", "2026-12-01T10:20:00Z") == "2027-01-01T00:00:00Z");
  CHECK(next("@yearly", "UTC", "2026-12-01T10:20:00Z") == "2027-01-01T00:00:00Z");
  CHECK(next("@annually", "UTC", "2027-01-01T00:00:00Z") == "2028-01-01T00:00:00Z");
  CHECK(cron::parse("@hourly").frequent);
  CHECK_FALSE(cron::parse("@daily").frequent);
}

TEST_CASE("cron: @every is aligned to the epoch, in any zone") {
  CHECK(next("@every 1s", "UTC", "2026-12-01T10:20:00Z") == "2026-12-01T10:20:01Z");
  CHECK(next("@every 250ms", "Europe/Berlin", "2026-12-01T10:20:00.100Z") == "2026-12-01T10:20:00.250Z");
  CHECK(next("@every 1h", "America/New_York", "2026-12-01T10:20:00Z") == "2026-12-01T11:00:00Z");
  CHECK(slots("@every 500ms", "UTC", "2026-12-01T00:00:00Z", "2026-12-01T00:00:02Z") ==
        std::vector<std::string>{"2026-12-01T00:00:00.500Z", "2026-12-01T00:00:01Z", "2026-12-01T00:00:01.500Z",
                                 "2026-12-01T00:00:02Z"});
  // The newest max_count only.
  const auto newest = cron::slots_between(cron::parse("@every 1s"), cron::locate_zone("UTC"),
                                          utc("2026-12-01T00:00:00Z"), utc("2026-12-01T01:00:00Z"), 3);
  REQUIRE(newest.size() == 3);
  CHECK(cron::format_utc(newest[0]) == "2026-12-01T00:59:58Z");
}

TEST_CASE("cron: next slot is strictly after the given instant") {
  CHECK(next("0 3 * * *", "UTC", "2026-12-01T03:00:00Z") == "2026-12-02T03:00:00Z");
  CHECK(next("0 3 * * *", "UTC", "2026-12-01T02:59:59.999Z") == "2026-12-01T03:00:00Z");
  CHECK(next("* * * * *", "UTC", "2026-12-01T03:00:30Z") == "2026-12-01T03:01:00Z");
  CHECK(next("0 0 29 2 *", "UTC", "2026-12-01T00:00:00Z") == "2028-02-29T00:00:00Z");
  CHECK(next("0 12 * * *", "Europe/Berlin", "2026-12-01T00:00:00Z") == "2026-12-01T11:00:00Z");  // CET
  CHECK(next("0 12 * * *", "Europe/Berlin", "2026-07-01T00:00:00Z") == "2026-07-01T10:00:00Z");  // CEST
}

TEST_CASE("cron: day-of-month and day-of-week both restricted match either (Vixie)") {
  // 2026-12-01 is a Tuesday. "1st or 15th, or any Friday".
  CHECK(slots("0 0 1,15 * fri", "UTC", "2026-11-30T00:00:00Z", "2026-12-16T00:00:00Z") ==
        std::vector<std::string>{"2026-12-01T00:00:00Z", "2026-12-04T00:00:00Z", "2026-12-11T00:00:00Z",
                                 "2026-12-15T00:00:00Z"});
  // A '*'-led day field is not a restriction: "*/2" days AND Fridays.
  CHECK(slots("0 0 */2 * fri", "UTC", "2026-11-30T00:00:00Z", "2026-12-31T00:00:00Z") ==
        std::vector<std::string>{"2026-12-11T00:00:00Z", "2026-12-25T00:00:00Z"});
  // One restricted: that one alone.
  CHECK(slots("0 0 * * fri", "UTC", "2026-11-30T00:00:00Z", "2026-12-12T00:00:00Z") ==
        std::vector<std::string>{"2026-12-04T00:00:00Z", "2026-12-11T00:00:00Z"});
}

TEST_CASE("cron: one-line errors name the field") {
  CHECK(error_of("61 * * * *") == "minute field \"61\": 61 is out of range 0-59");
  CHECK(error_of("0 24 * * *") == "hour field \"24\": 24 is out of range 0-23");
  CHECK(error_of("0 0 0 * *") == "day-of-month field \"0\": 0 is out of range 1-31");
  CHECK(error_of("0 0 * 13 *") == "month field \"13\": 13 is out of range 1-12");
  CHECK(error_of("0 0 * * 8") == "day-of-week field \"8\": 8 is out of range 0-7");
  CHECK(error_of("0 0 * * mun") == "day-of-week field \"mun\": unknown value \"mun\"");
  CHECK(error_of("0 5-2 * * *") == "hour field \"5-2\": range 5-2 is backwards");
  CHECK(error_of("*/0 * * * *") == "minute field \"*/0\": step must be at least 1");
  CHECK(error_of("*/61 * * * *") == "minute field \"*/61\": step 61 is larger than the range 0-59");
  CHECK(error_of("1,,2 * * * *") == "minute field \"1,,2\": an empty list item");
  CHECK(error_of("x * * * *") == "minute field \"x\": unknown value \"x\"");
  CHECK(error_of("0 0 * *") == "expected 5 fields (minute hour day-of-month month day-of-week), got 4 in \"0 0 * *\"");
  CHECK(error_of("0 0 * * * *").find("got 6") != std::string::npos);
  CHECK(error_of("") == "the schedule is empty");
  CHECK(error_of("@reboot").find("unknown schedule \"@reboot\"") == 0);
  CHECK(error_of("@every 10ms") == "@every: the interval must be between 100ms and 24h (got 10ms)");
  CHECK(error_of("@every soon").find("@every: ") == 0);
  CHECK(error_of("0 0 30 2 *") == "day-of-month field \"30\" never occurs in month field \"2\"");
  CHECK(error_of("0 0 31 apr,jun *") == "day-of-month field \"31\" never occurs in month field \"apr,jun\"");
  CHECK(error_of("0 0 30 2 mon") == "accepted");  // or any Monday in February
  CHECK(error_of("0 0 29 2 *") == "accepted");    // leap years
}

TEST_CASE("cron: unknown time zones are refused") {
  CHECK_THROWS_WITH_AS(cron::locate_zone("Europe/Berln"),
                       "unknown time zone \"Europe/Berln\" (not in the system's tz database)", oncely::ConfigError);
  CHECK_THROWS_AS(cron::locate_zone(""), oncely::ConfigError);
  CHECK(cron::locate_zone("UTC") != nullptr);
}

// Europe/Berlin, 2026-03-29: at 01:00 UTC the wall clock goes from 02:00 CET to 03:00 CEST,
// so 02:00-02:59 do not exist. 2026-10-25: at 01:00 UTC it goes back from 03:00 CEST to
// 02:00 CET, so 02:00-02:59 happen twice.
TEST_CASE("cron: Europe/Berlin daylight-saving days") {
  struct Row {
    const char* schedule;
    const char* from;
    const char* to;
    std::vector<std::string> slots;
  };
  const std::vector<Row> table{
      // Spring forward. A fixed time in the gap runs once, at the first instant after it (03:00 CEST).
      {"30 2 * * *", "2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z", {"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
      {"0,30 2 * * *", "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z", {"2026-03-29T01:00:00Z"}},
      // ... and 03:00 itself is the same instant: one slot, not two.
      {"30 2,3 * * *",
       "2026-03-29T00:00:00Z",
       "2026-03-29T02:00:00Z",
       {"2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"}},
      // Fixed times either side are untouched.
      {"30 1 * * *", "2026-03-28T12:00:00Z", "2026-03-29T12:00:00Z", {"2026-03-29T00:30:00Z"}},
      {"30 3 * * *", "2026-03-28T12:00:00Z", "2026-03-29T12:00:00Z", {"2026-03-29T01:30:00Z"}},
      // A frequent schedule runs on the clock as it is: the missing hour has no slots.
      {"0,30 * * * *",
       "2026-03-29T00:00:00Z",
       "2026-03-29T02:00:00Z",
       {"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z", "2026-03-29T02:00:00Z"}},
      {"@hourly",
       "2026-03-28T23:30:00Z",
       "2026-03-29T02:30:00Z",
       {"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
      // Fall back. A fixed time in the repeated hour runs once, at its first occurrence (CEST).
      {"30 2 * * *", "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z", {"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
      {"0 3 * * *", "2026-10-24T12:00:00Z", "2026-10-25T12:00:00Z", {"2026-10-25T02:00:00Z"}},
      // A frequent schedule runs in both occurrences: 02:00 and 02:30 CEST, then CET.
      {"0,30 * * * *",
       "2026-10-24T23:45:00Z",
       "2026-10-25T01:45:00Z",
       {"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z"}},
      {"*/30 2 * * *",
       "2026-10-24T23:45:00Z",
       "2026-10-25T01:45:00Z",
       {"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z"}},
      // A daily slot outside the changed hour keeps its wall time: 24 h apart except across the change.
      {"0 12 * * *", "2026-03-28T00:00:00Z", "2026-03-30T00:00:00Z", {"2026-03-28T11:00:00Z", "2026-03-29T10:00:00Z"}},
  };
  for (const auto& row : table) {
    CAPTURE(row.schedule);
    CAPTURE(row.from);
    CHECK(slots(row.schedule, "Europe/Berlin", row.from, row.to) == row.slots);
  }
}

// America/New_York, 2026-03-08: at 07:00 UTC 02:00 EST becomes 03:00 EDT (02:00-02:59 do not
// exist). 2026-11-01: at 06:00 UTC 02:00 EDT becomes 01:00 EST (01:00-01:59 happen twice).
TEST_CASE("cron: America/New_York daylight-saving days") {
  struct Row {
    const char* schedule;
    const char* from;
    const char* to;
    std::vector<std::string> slots;
  };
  const std::vector<Row> table{
      {"30 2 * * *", "2026-03-07T12:00:00Z", "2026-03-09T12:00:00Z", {"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
      {"15,45 2 * * *", "2026-03-08T00:00:00Z", "2026-03-08T12:00:00Z", {"2026-03-08T07:00:00Z"}},
      {"0 3 * * *", "2026-03-08T00:00:00Z", "2026-03-08T12:00:00Z", {"2026-03-08T07:00:00Z"}},
      {"*/30 * * * *",
       "2026-03-08T06:15:00Z",
       "2026-03-08T07:45:00Z",
       {"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
      // Fall back: 01:30 runs once, at 01:30 EDT (05:30 UTC), not again at 01:30 EST (06:30 UTC).
      {"30 1 * * *", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z", {"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
      {"0 1 * * *", "2026-11-01T00:00:00Z", "2026-11-01T12:00:00Z", {"2026-11-01T05:00:00Z"}},
      {"0 2 * * *", "2026-11-01T00:00:00Z", "2026-11-01T12:00:00Z", {"2026-11-01T07:00:00Z"}},
      // Frequent: both 01:xx hours run; @hourly has 25 slots on this day.
      {"30 * * * *",
       "2026-11-01T04:45:00Z",
       "2026-11-01T07:45:00Z",
       {"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:30:00Z"}},
  };
  for (const auto& row : table) {
    CAPTURE(row.schedule);
    CAPTURE(row.from);
    CHECK(slots(row.schedule, "America/New_York", row.from, row.to) == row.slots);
  }
  CHECK(slots("@hourly", "America/New_York", "2026-11-01T03:59:00Z", "2026-11-02T04:59:00Z").size() == 25);
  CHECK(slots("@hourly", "America/New_York", "2026-03-08T04:59:00Z", "2026-03-09T03:59:00Z").size() == 23);
  CHECK(slots("@daily", "America/New_York", "2026-10-31T12:00:00Z", "2026-11-03T12:00:00Z").size() == 3);
}

TEST_CASE("cron: latest_in finds the newest slot near and far") {
  const auto zone = cron::locate_zone("UTC");
  const auto minute = cron::parse("* * * * *");
  CHECK(cron::format_utc(*cron::latest_in(minute, zone, utc("2026-01-01T00:00:00Z"), utc("2026-12-01T10:20:30Z"))) ==
        "2026-12-01T10:20:00Z");
  const auto yearly = cron::parse("@yearly");
  CHECK(cron::format_utc(*cron::latest_in(yearly, zone, utc("2020-06-01T00:00:00Z"), utc("2026-12-01T00:00:00Z"))) ==
        "2026-01-01T00:00:00Z");
  CHECK_FALSE(cron::latest_in(yearly, zone, utc("2026-01-01T00:00:00Z"), utc("2026-12-01T00:00:00Z")));
  CHECK(cron::format_utc(*cron::latest_in(cron::parse("@every 200ms"), zone, utc("2026-01-01T00:00:00Z"),
                                          utc("2026-12-01T00:00:00.333Z"))) == "2026-12-01T00:00:00.200Z");
}

TEST_CASE("cron: format_utc") {
  CHECK(cron::format_utc(utc("2026-03-29T01:00:00Z")) == "2026-03-29T01:00:00Z");
  CHECK(cron::format_utc(utc("2026-03-29T01:00:00.250Z")) == "2026-03-29T01:00:00.250Z");
}
