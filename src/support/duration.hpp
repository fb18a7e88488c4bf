#pragma once
// Human durations ("250ms", "5s", "2m", "1h30m", "7d") to std::chrono and back.

#include <chrono>
#include <string>
#include <string_view>

namespace oncely::detail {

/// Parses a sequence of <number><unit> terms, unit one of ms, s, m, h, d; numbers may have
/// a decimal part ("1.5s"). Throws ConfigError (path empty: the caller knows where it is)
/// for anything else, e.g. "5 sex", "", "5" or "-1s".
std::chrono::milliseconds parse_duration(std::string_view text);

/// The shortest exact spelling parse_duration accepts back ("1500ms" -> "1500ms", "2m").
std::string format_duration(std::chrono::milliseconds d);

}  // namespace oncely::detail
