#include "support/cron_expression.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <deque>

#include <date/tz.h>

#include "oncely/errors.hpp"
#include "support/duration.hpp"
#include "support/text.hpp"

namespace oncely::detail::cron {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using LocalSeconds = date::local_seconds;
using SysSeconds = date::sys_seconds;

struct Field {
  std::string_view name;  // as errors name it
  int min;
  int max;
  const std::array<std::string_view, 13>* names = nullptr;  // names[i] means i (empty: none)
  int first_name = 0;                                       // the value of names[0]
};

constexpr std::array<std::string_view, 13> kMonthNames{"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                                       "aug", "sep", "oct", "nov", "dec", ""};
constexpr std::array<std::string_view, 13> kDayNames{"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

constexpr Field kMinute{"minute", 0, 59};
constexpr Field kHour{"hour", 0, 23};
constexpr Field kDayOfMonth{"day-of-month", 1, 31};
constexpr Field kMonth{"month", 1, 12, &kMonthNames, 1};
constexpr Field kDayOfWeek{"day-of-week", 0, 7, &kDayNames, 0};  // 7 is Sunday as well

[[noreturn]] void fail(const Field& field, std::string_view text, const std::string& why) {
  throw ConfigError("", std::string(field.name) + " field \"" + printable(text) + "\": " + why);
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int value_of(const Field& field, std::string_view whole, std::string_view token) {
  if (token.empty()) fail(field, whole, "a number is missing");
  if (std::isdigit(static_cast<unsigned char>(token[0]))) {
    if (token.size() > 3 ||
        !std::all_of(token.begin(), token.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      fail(field, whole, "\"" + printable(token) + "\" is not a number");
    }
    const int n = std::stoi(std::string(token));
    if (n < field.min || n > field.max) {
      fail(field, whole,
           std::to_string(n) + " is out of range " + std::to_string(field.min) + "-" + std::to_string(field.max));
    }
    return n;
  }
  if (field.names != nullptr) {
    const std::string name = lower(token);
    for (std::size_t i = 0; i < field.names->size(); ++i) {
      if (!(*field.names)[i].empty() && (*field.names)[i] == name) return field.first_name + static_cast<int>(i);
    }
  }
  fail(field, whole, "unknown value \"" + printable(token) + "\"");
}

// One comma-separated item: *, */n, a, a-b, a-b/n, a/n (a to the field's maximum).
void parse_item(const Field& field, std::string_view whole, std::string_view item, std::vector<bool>& bits) {
  if (item.empty()) fail(field, whole, "an empty list item");
  int step = 1;
  std::string_view range = item;
  if (const auto slash = item.find('/'); slash != std::string_view::npos) {
    range = item.substr(0, slash);
    const std::string_view step_text = item.substr(slash + 1);
    if (step_text.empty() || step_text.size() > 3 || !std::all_of(step_text.begin(), step_text.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      fail(field, whole, "step \"" + printable(step_text) + "\" is not a number");
    }
    step = std::stoi(std::string(step_text));
    if (step < 1) fail(field, whole, "step must be at least 1");
  }
  int low = field.min;
  int high = field.max == 7 ? 6 : field.max;  // "*" in day-of-week is 0-6
  if (range != "*") {
    if (const auto dash = range.find('-'); dash != std::string_view::npos) {
      low = value_of(field, whole, range.substr(0, dash));
      high = value_of(field, whole, range.substr(dash + 1));
      if (high < low) fail(field, whole, "range " + std::to_string(low) + "-" + std::to_string(high) + " is backwards");
    } else {
      low = value_of(field, whole, range);
      // "a"; "a/n" runs to the field's maximum: in day-of-week that is 7 (Sunday again), so
      // that "7/1" is Sunday and "5/1" Friday to Sunday, not nothing.
      high = item.find('/') == std::string_view::npos ? low : field.max;
    }
  }
  if (step > high - low + 1 && step > 1) {
    fail(field, whole,
         "step " + std::to_string(step) + " is larger than the range " + std::to_string(low) + "-" +
             std::to_string(high));
  }
  for (int v = low; v <= high; v += step) bits[static_cast<std::size_t>(v == 7 && field.max == 7 ? 0 : v)] = true;
}

template <std::size_t N>
std::bitset<N> parse_field(const Field& field, std::string_view text) {
  std::vector<bool> bits(N, false);
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    parse_item(field, text,
               text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start), bits);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::bitset<N> out;
  for (std::size_t i = 0; i < N; ++i) out[i] = bits[i];
  return out;
}

std::vector<std::string_view> split_whitespace(std::string_view text) {
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const std::size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) parts.push_back(text.substr(start, i - start));
  }
  return parts;
}

std::string_view macro(std::string_view name) {
  if (name == "@yearly" || name == "@annually") return "0 0 1 1 *";
  if (name == "@monthly") return "0 0 1 * *";
  if (name == "@weekly") return "0 0 * * 0";
  if (name == "@daily" || name == "@midnight") return "0 0 * * *";
  if (name == "@hourly") return "0 * * * *";
  return {};
}

// Days a month can have (February: 29, in leap years).
constexpr std::array<int, 13> kLongestMonth{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

void check_some_day_exists(const Schedule& s, std::string_view dom_text, std::string_view month_text) {
  if (s.dow_restricted && s.dom_restricted) return;  // either day field may match
  for (int m = 1; m <= 12; ++m) {
    if (!s.months[static_cast<std::size_t>(m)]) continue;
    for (int d = 1; d <= kLongestMonth[static_cast<std::size_t>(m)]; ++d) {
      if (s.days_of_month[static_cast<std::size_t>(d)]) return;
    }
  }
  throw ConfigError("", "day-of-month field \"" + printable(dom_text) + "\" never occurs in month field \"" +
                            printable(month_text) + "\"");
}

Schedule parse_fields(std::string_view text, const std::vector<std::string_view>& f) {
  Schedule s;
  s.text = std::string(text);
  s.minutes = parse_field<60>(kMinute, f[0]);
  s.hours = parse_field<24>(kHour, f[1]);
  s.days_of_month = parse_field<32>(kDayOfMonth, f[2]);
  s.months = parse_field<13>(kMonth, f[3]);
  s.days_of_week = parse_field<7>(kDayOfWeek, f[4]);
  s.dom_restricted = f[2][0] != '*';
  s.dow_restricted = f[4][0] != '*';
  s.frequent = f[0][0] == '*' || f[1][0] == '*';
  check_some_day_exists(s, f[2], f[3]);
  return s;
}

bool day_matches(const Schedule& s, const date::year_month_day& ymd, date::weekday wd) {
  const bool dom = s.days_of_month[static_cast<unsigned>(ymd.day())];
  const bool dow = s.days_of_week[wd.c_encoding()];
  if (s.dom_restricted && s.dow_restricted) return dom || dow;
  return dom && dow;
}

template <std::size_t N>
std::optional<int> next_bit(const std::bitset<N>& bits, int from) {
  for (auto i = static_cast<std::size_t>(from); i < N; ++i) {
    if (bits[i]) return static_cast<int>(i);
  }
  return std::nullopt;
}

// The first wall-clock minute in [from, before) that matches, from a whole minute.
std::optional<LocalSeconds> next_local_match(const Schedule& s, LocalSeconds from, LocalSeconds before) {
  LocalSeconds at = from;
  // Each turn moves to the next matching minute, hour, day or month: a schedule parse()
  // accepts matches within 8 years (29 February), a few thousand turns.
  for (int turn = 0; turn < 100000 && at < before; ++turn) {
    const auto day = date::floor<date::days>(at);
    const date::year_month_day ymd{day};
    if (!s.months[static_cast<unsigned>(ymd.month())]) {
      at = LocalSeconds{date::local_days{(ymd.year() / ymd.month() + date::months{1}) / 1}};
      continue;
    }
    if (!day_matches(s, ymd, date::weekday{day})) {
      at = LocalSeconds{day + date::days{1}};
      continue;
    }
    const auto since_midnight = at - LocalSeconds{day};
    const int hour = static_cast<int>(std::chrono::duration_cast<std::chrono::hours>(since_midnight).count());
    const int minute = static_cast<int>(std::chrono::duration_cast<minutes>(since_midnight).count() % 60);
    if (!s.hours[static_cast<std::size_t>(hour)]) {
      const auto h = next_bit(s.hours, hour + 1);
      at = h ? LocalSeconds{day} + std::chrono::hours(*h) : LocalSeconds{day + date::days{1}};
      continue;
    }
    if (!s.minutes[static_cast<std::size_t>(minute)]) {
      const auto m = next_bit(s.minutes, minute + 1);
      at = m ? LocalSeconds{day} + std::chrono::hours(hour) + minutes(*m)
             : LocalSeconds{day} + std::chrono::hours(hour + 1);
      continue;
    }
    return at;
  }
  return std::nullopt;
}

LocalSeconds to_local(SysSeconds t, seconds offset) { return LocalSeconds{(t + offset).time_since_epoch()}; }
SysSeconds to_sys(LocalSeconds t, seconds offset) { return SysSeconds{t.time_since_epoch() - offset}; }

// The tz database's "no further transitions" is the year 32767.
constexpr auto kEndOfTime = SysSeconds{date::sys_days{date::year{30000} / 1 / 1}};

std::optional<SysSeconds> next_cron(const Schedule& s, const date::time_zone* zone, SysSeconds first) {
  SysSeconds at = first;
  // One turn per offset period (two a year in a DST zone): centuries of them.
  for (int turn = 0; turn < 2000; ++turn) {
    const date::sys_info info = zone->get_info(at);
    LocalSeconds from = to_local(at, info.offset);
    if (!s.frequent && info.begin > SysSeconds{date::sys_days{date::year{1800} / 1 / 1}}) {
      // After a fall-back, the wall times up to the old offset's end already happened once.
      const date::sys_info before = zone->get_info(info.begin - seconds(1));
      if (before.offset > info.offset) from = std::max(from, to_local(info.begin, before.offset));
    }
    const bool last_period = info.end >= kEndOfTime;
    const LocalSeconds until = last_period ? LocalSeconds::max() : to_local(info.end, info.offset);
    if (const auto match = next_local_match(s, date::ceil<minutes>(from), until)) return to_sys(*match, info.offset);
    if (last_period) return std::nullopt;
    if (!s.frequent) {
      // A spring-forward skips [end + offset, end + next offset) of wall time: a fixed-time
      // slot in there runs at the first instant after the gap, once.
      const date::sys_info next = zone->get_info(info.end);
      if (next.offset > info.offset &&
          next_local_match(s, date::ceil<minutes>(to_local(info.end, info.offset)), to_local(info.end, next.offset))) {
        return info.end;
      }
    }
    at = info.end;
  }
  return std::nullopt;
}

}  // namespace

Schedule parse(std::string_view text) {
  const std::vector<std::string_view> words = split_whitespace(text);
  if (words.empty()) throw ConfigError("", "the schedule is empty");
  const std::string trimmed = [&] {
    std::string t;
    for (const auto w : words) t += (t.empty() ? "" : " ") + std::string(w);
    return t;
  }();
  if (words[0][0] == '@') {
    const std::string name = lower(words[0]);
    if (name == "@every") {
      if (words.size() != 2) throw ConfigError("", "@every takes one duration, such as \"@every 30s\"");
      Schedule s;
      s.text = trimmed;
      s.frequent = true;
      try {
        s.every = parse_duration(words[1]);
      } catch (const ConfigError& e) {
        throw ConfigError("", "@every: " + e.reason());
      }
      if (s.every < kMinEvery || s.every > kMaxEvery) {
        throw ConfigError("",
                          "@every: the interval must be between 100ms and 24h (got " + format_duration(s.every) + ")");
      }
      return s;
    }
    const std::string_view expansion = macro(name);
    if (expansion.empty() || words.size() != 1) {
      throw ConfigError(
          "", "unknown schedule \"" + printable(trimmed) +
                  "\" (expected five fields, @hourly, @daily, @weekly, @monthly, @yearly or @every <duration>)");
    }
    Schedule s = parse_fields(expansion, split_whitespace(expansion));
    s.text = name;
    return s;
  }
  if (words.size() != 5) {
    throw ConfigError("", "expected 5 fields (minute hour day-of-month month day-of-week), got " +
                              std::to_string(words.size()) + " in \"" + printable(trimmed) + "\"");
  }
  return parse_fields(trimmed, words);
}

const date::time_zone* locate_zone(const std::string& name) {
  if (name.empty()) throw ConfigError("", "the time zone is empty");
  try {
    return date::locate_zone(name);
  } catch (const std::exception&) {
    throw ConfigError("", "unknown time zone \"" + printable(name) + "\" (not in the system's tz database)");
  }
}

std::optional<Instant> next_after(const Schedule& schedule, const date::time_zone* zone, Instant t) {
  if (schedule.every.count() > 0) {
    const auto n = t.time_since_epoch().count() / schedule.every.count();
    auto slot = Instant{schedule.every * n};
    while (slot <= t) slot += schedule.every;  // floor for times before the epoch too
    return slot;
  }
  const auto found = next_cron(schedule, zone, date::floor<seconds>(t) + seconds(1));
  if (!found) return std::nullopt;
  return Instant{std::chrono::duration_cast<milliseconds>(found->time_since_epoch())};
}

std::vector<Instant> slots_between(const Schedule& schedule, const date::time_zone* zone, Instant after, Instant until,
                                   std::size_t max_count) {
  std::deque<Instant> kept;
  if (max_count == 0 || until <= after) return {};
  if (schedule.every.count() > 0) {
    // Arithmetic: the newest max_count multiples of the interval in (after, until].
    const auto last = Instant{schedule.every * (until.time_since_epoch() / schedule.every)};
    auto first = *next_after(schedule, zone, after);
    const auto newest_first = last - schedule.every * static_cast<long>(max_count - 1);
    if (first < newest_first) first = newest_first;
    std::vector<Instant> out;
    for (auto t = first; t <= last; t += schedule.every) out.push_back(t);
    return out;
  }
  for (auto t = next_after(schedule, zone, after); t && *t <= until; t = next_after(schedule, zone, *t)) {
    kept.push_back(*t);
    if (kept.size() > max_count) kept.pop_front();
  }
  return {kept.begin(), kept.end()};
}

std::optional<Instant> latest_in(const Schedule& schedule, const date::time_zone* zone, Instant after, Instant until) {
  // Windows back from `until`, doubling: a dense schedule is found in the first day, a
  // sparse one (yearly) in a few turns, without walking from an old `after`.
  auto span = std::chrono::duration_cast<milliseconds>(std::chrono::hours(24));
  constexpr auto kLongest = std::chrono::duration_cast<milliseconds>(std::chrono::hours(24 * 366 * 50));
  while (true) {
    const Instant from = span >= kLongest || until - after <= span ? after : until - span;
    const auto newest = slots_between(schedule, zone, from, until, 1);
    if (!newest.empty()) return newest.back();
    if (from == after) return std::nullopt;
    span *= 2;
  }
}

std::string format_utc(Instant t) {
  const auto day = date::floor<date::days>(t);
  const date::year_month_day ymd{day};
  const auto since_midnight = t - day;
  const auto ms = since_midnight.count() % 1000;
  const auto s = since_midnight.count() / 1000;
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%04d-%02u-%02uT%02lld:%02lld:%02lld", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  std::string out(buffer);
  if (ms != 0) {
    std::snprintf(buffer, sizeof buffer, ".%03lld", static_cast<long long>(ms));
    out += buffer;
  }
  return out + "Z";
}

}  // namespace oncely::detail::cron
