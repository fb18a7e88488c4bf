// Cron schedules. Input: the schedule, optionally followed by a newline and a time zone
// name. Whatever parse() accepts must behave: from a few instants (fixed ones around DST
// changes, and one taken from the input), the next slot is strictly later; an @every slot
// is the next multiple of its interval; in UTC the next slot is a whole minute whose wall
// clock matches the fields, with no matching minute before it; slots_between lists
// ascending slots inside its window, the newest agreeing with latest_in.
#include <date/date.h>
#include <date/tz.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_check.hpp"
#include "oncely/errors.hpp"
#include "support/cron_expression.hpp"

namespace {

namespace cron = oncely::detail::cron;
using cron::Instant;
using std::chrono::milliseconds;
using std::chrono::minutes;

// The fields' rule at one UTC minute (day-of-month OR day-of-week when both are restricted).
bool matches_utc(const cron::Schedule& s, Instant t) {
  const auto day = date::floor<date::days>(t);
  const date::year_month_day ymd{day};
  const date::weekday wd{day};
  const auto since = t - day;
  const auto hour = static_cast<std::size_t>(std::chrono::duration_cast<std::chrono::hours>(since).count());
  const auto minute = static_cast<std::size_t>(std::chrono::duration_cast<minutes>(since).count() % 60);
  const bool dom = s.days_of_month[static_cast<unsigned>(ymd.day())];
  const bool dow = s.days_of_week[wd.c_encoding()];
  const bool day_ok = s.dom_restricted && s.dow_restricted ? (dom || dow) : (dom && dow);
  return s.minutes[minute] && s.hours[hour] && s.months[static_cast<unsigned>(ymd.month())] && day_ok;
}

Instant at(date::sys_days day, milliseconds since_midnight) { return Instant{day} + since_midnight; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace date;
  const std::string_view input = oncely::fuzz::as_text(data, size);
  const std::size_t newline = input.find('\n');
  const std::string_view text = input.substr(0, newline);
  cron::Schedule s;
  try {
    s = cron::parse(text);
  } catch (const oncely::ConfigError&) {
    return 0;
  }
  FUZZ_CHECK(!s.text.empty(), input, s.text);
  // The same text parses to the same schedule (the trimmed text is what fingerprints keep).
  const cron::Schedule again = cron::parse(s.text);
  FUZZ_CHECK(again.every == s.every && again.minutes == s.minutes && again.hours == s.hours &&
                 again.days_of_month == s.days_of_month && again.months == s.months &&
                 again.days_of_week == s.days_of_week && again.frequent == s.frequent,
             input, s.text);

  const date::time_zone* utc = cron::locate_zone("UTC");
  const date::time_zone* zone = utc;
  if (newline != std::string_view::npos) {
    try {
      zone = cron::locate_zone(std::string(input.substr(newline + 1)));
    } catch (const oncely::ConfigError&) {
      zone = utc;
    }
  }

  std::uint64_t seed = 0;
  std::memcpy(&seed, data, std::min<std::size_t>(size, sizeof seed));
  const Instant starts[] = {
      at(sys_days{2026_y / March / 29}, std::chrono::minutes(59)),               // Europe springs forward at 01:00Z
      at(sys_days{2026_y / November / 1}, std::chrono::hours(5) + minutes(30)),  // America falls back at 06:00Z
      at(sys_days{2028_y / February / 28}, std::chrono::hours(23) + minutes(59) + std::chrono::seconds(59)),
      Instant{milliseconds(-86'400'000)},
      Instant{milliseconds(static_cast<std::int64_t>(seed % (4'102'444'800'000ULL)))},  // 1970..2100
  };
  for (const Instant t : starts) {
    const auto next = cron::next_after(s, zone, t);
    if (s.every.count() > 0) {
      FUZZ_CHECK(next.has_value(), input, cron::format_utc(t));
      FUZZ_CHECK(*next > t && *next - t <= s.every, input, cron::format_utc(*next));
      FUZZ_CHECK(next->time_since_epoch() % s.every == milliseconds(0), input, cron::format_utc(*next));
    } else {
      // parse() refuses schedules that never match; within a zone's last period nothing ends.
      FUZZ_CHECK(next.has_value(), input, cron::format_utc(t));
      FUZZ_CHECK(*next > t, input, cron::format_utc(t) + " -> " + cron::format_utc(*next));
      if (zone == utc) {
        FUZZ_CHECK(next->time_since_epoch() % minutes(1) == milliseconds(0), input, cron::format_utc(*next));
        FUZZ_CHECK(matches_utc(s, *next), input, cron::format_utc(*next));
        // No matching minute before it (checked for gaps up to three days).
        if (*next - t <= std::chrono::hours(72)) {
          for (Instant m = date::ceil<minutes>(t + milliseconds(1)); m < *next; m += minutes(1)) {
            FUZZ_CHECK(!matches_utc(s, m), input, cron::format_utc(m) + " skipped before " + cron::format_utc(*next));
          }
        }
      }
    }
    const auto following = cron::next_after(s, zone, *next);
    FUZZ_CHECK(following && *following > *next, input, cron::format_utc(*next));

    const Instant until = t + std::chrono::hours(49);
    const auto slots = cron::slots_between(s, zone, t, until, 5);
    FUZZ_CHECK(slots.size() <= 5, input, std::to_string(slots.size()));
    for (std::size_t i = 0; i < slots.size(); ++i) {
      FUZZ_CHECK(slots[i] > t && slots[i] <= until, input, cron::format_utc(slots[i]));
      if (i > 0) FUZZ_CHECK(slots[i] > slots[i - 1], input, cron::format_utc(slots[i]));
    }
    const auto latest = cron::latest_in(s, zone, t, until);
    FUZZ_CHECK(latest.has_value() == !slots.empty(), input, cron::format_utc(t));
    if (latest)
      FUZZ_CHECK(*latest == slots.back(), input, cron::format_utc(*latest) + " vs " + cron::format_utc(slots.back()));
    if (!slots.empty()) FUZZ_CHECK(slots.front() >= *next, input, cron::format_utc(slots.front()));
  }
  return 0;
}
