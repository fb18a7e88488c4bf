#include "support/duration.hpp"

#include <cctype>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "oncely/errors.hpp"

namespace oncely::detail {

std::chrono::milliseconds parse_duration(std::string_view text) {
  const auto fail = [&] {
    throw ConfigError("", "bad duration '" + std::string(text) + "' (expected e.g. 250ms, 5s, 2m, 1h30m, 7d)");
  };
  if (text.empty()) fail();
  double total_ms = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t number_begin = pos;
    while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
    const std::string number(text.substr(number_begin, pos - number_begin));
    const std::size_t unit_begin = pos;
    while (pos < text.size() && std::isalpha(static_cast<unsigned char>(text[pos]))) ++pos;
    const std::string_view unit = text.substr(unit_begin, pos - unit_begin);
    if (number.empty() || number == "." || number.find('.') != number.rfind('.')) fail();
    double factor = 0;
    if (unit == "ms")
      factor = 1;
    else if (unit == "s")
      factor = 1e3;
    else if (unit == "m")
      factor = 60e3;
    else if (unit == "h")
      factor = 3600e3;
    else if (unit == "d")
      factor = 86400e3;
    else
      fail();
    try {
      total_ms += std::stod(number) * factor;
    } catch (const std::out_of_range&) {  // more digits than a double holds
      fail();
    }
  }
  if (!(total_ms <= static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2))) fail();
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(total_ms)));
}

std::string format_duration(std::chrono::milliseconds d) {
  const auto ms = d.count();
  struct Unit {
    std::int64_t ms;
    const char* name;
  };
  for (const Unit u : {Unit{86400000, "d"}, Unit{3600000, "h"}, Unit{60000, "m"}, Unit{1000, "s"}}) {
    if (ms != 0 && ms % u.ms == 0) return std::to_string(ms / u.ms) + u.name;
  }
  return std::to_string(ms) + "ms";
}

}  // namespace oncely::detail
