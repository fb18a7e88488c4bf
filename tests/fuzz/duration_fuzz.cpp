// Durations ("250ms", "1h30m", "1.5s"): parse_duration either refuses the text with a
// ConfigError or returns a duration in [0, INT64_MAX/2] ms whose format_duration spelling
// parses back to the same value.
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "fuzz_check.hpp"
#include "oncely/errors.hpp"
#include "support/duration.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using oncely::detail::format_duration;
  using oncely::detail::parse_duration;
  const std::string_view text = oncely::fuzz::as_text(data, size);
  std::chrono::milliseconds d{};
  try {
    d = parse_duration(text);
  } catch (const oncely::ConfigError&) {
    return 0;
  }
  FUZZ_CHECK(d.count() >= 0, text, std::to_string(d.count()));
  FUZZ_CHECK(d.count() <= std::numeric_limits<std::int64_t>::max() / 2, text, std::to_string(d.count()));
  const std::string spelled = format_duration(d);
  std::chrono::milliseconds back{};
  try {
    back = parse_duration(spelled);
  } catch (const oncely::ConfigError& e) {
    FUZZ_CHECK(!"format_duration's spelling parses", text, spelled + ": " + e.what());
  }
  FUZZ_CHECK(back == d, text, spelled + " -> " + std::to_string(back.count()));
  FUZZ_CHECK(format_duration(back) == spelled, text, spelled);
  return 0;
}
