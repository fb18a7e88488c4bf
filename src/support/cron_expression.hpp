#pragma once
// Cron schedules: the parser and the slot arithmetic, pure (no database, no clock).
//
// A schedule is a set of instants ("slots"). Five-field expressions (minute hour
// day-of-month month day-of-week, with lists, ranges, steps and names) and the @hourly ...
// @yearly macros are matched against the wall clock of a time zone; `@every <duration>`
// slots are multiples of the interval since the Unix epoch, whatever the zone.
//
// Daylight saving follows Vixie cron (man 8 cron): a "frequent" expression (its minute or
// hour field starts with '*') runs on the clock as it is, so wall times skipped by a
// spring-forward do not run and wall times repeated by a fall-back run twice; any other
// expression (a fixed time of day) runs once per wall time: a slot in a gap runs at the
// first instant after the gap, a slot in a repeated hour at its first occurrence.
//
// Time zones come from the system's tz database (Debian's tzdata) through Howard
// Hinnant's date/tz (libhowardhinnant-date-dev); docs/configuration.md says why.

#include <bitset>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace date {
class time_zone;
}

namespace oncely::detail::cron {

/// Slots carry milliseconds (an `@every 250ms` slot); a cron slot is a whole minute of
/// its zone's wall clock.
using Instant = std::chrono::sys_time<std::chrono::milliseconds>;

struct Schedule {
  std::string text;  ///< as given, trimmed
  /// `@every`: slots are the multiples of this since the epoch; zero for an expression.
  std::chrono::milliseconds every{0};
  std::bitset<60> minutes;
  std::bitset<24> hours;
  std::bitset<32> days_of_month;  ///< bit 1..31
  std::bitset<13> months;         ///< bit 1..12
  std::bitset<7> days_of_week;    ///< bit 0 (Sunday)..6; 7 in the text is Sunday too
  /// A day field is restricted when it does not start with '*'. Both restricted: a day
  /// matches when either matches (Vixie); otherwise both must.
  bool dom_restricted = false;
  bool dow_restricted = false;
  /// Minute or hour field starts with '*': runs on the clock as it is across DST changes.
  bool frequent = false;
};

/// Parses a schedule. Throws ConfigError (empty path) with a one-line reason naming the
/// field, e.g. `minute field "61": 61 is out of range 0-59`.
Schedule parse(std::string_view text);

/// The shortest and longest `@every` interval.
inline constexpr std::chrono::milliseconds kMinEvery{100};
inline constexpr std::chrono::milliseconds kMaxEvery{std::chrono::hours(24)};

/// The zone named `name` ("UTC", "Europe/Berlin"). Throws ConfigError (empty path) for an
/// unknown name.
const date::time_zone* locate_zone(const std::string& name);

/// The first slot strictly after `t`; nullopt if there is none (a cron expression with no
/// match before the tz database's end, which parse() makes impossible in practice).
std::optional<Instant> next_after(const Schedule& schedule, const date::time_zone* zone, Instant t);

/// The slots in (after, until], oldest first, at most the newest `max_count` of them.
std::vector<Instant> slots_between(const Schedule& schedule, const date::time_zone* zone, Instant after, Instant until,
                                   std::size_t max_count);

/// The newest slot in (after, until], if any.
std::optional<Instant> latest_in(const Schedule& schedule, const date::time_zone* zone, Instant after, Instant until);

/// "2026-03-29T01:00:00Z"; with milliseconds ("...:00.250Z") only when the slot has them.
std::string format_utc(Instant t);

}  // namespace oncely::detail::cron
