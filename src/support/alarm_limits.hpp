#pragma once
// The bounds of the alarm thresholds (oncely::AlarmConfig), in the worker file's "alarms"
// (config.cpp) and `oncely check`'s threshold options alike. The least is 0 for each.

namespace oncely::detail {

inline constexpr int kMaxAlarmCount = 1000000000;    // dead_letters_*, failure_rate_min_attempts
inline constexpr double kMaxAlarmPercent = 100;      // failure_rate_*: percentages of attempts
inline constexpr double kMaxAlarmPerMinute = 60000;  // dead_letter_growth_*: up to one a millisecond

}  // namespace oncely::detail
