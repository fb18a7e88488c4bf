#include <doctest/doctest.h>

#include "oncely/errors.hpp"
#include "support/duration.hpp"

using namespace std::chrono_literals;
using oncely::detail::format_duration;
using oncely::detail::parse_duration;

TEST_CASE("duration: units and combinations") {
  CHECK(parse_duration("250ms") == 250ms);
  CHECK(parse_duration("5s") == 5s);
  CHECK(parse_duration("2m") == 2min);
  CHECK(parse_duration("1h30m") == 90min);
  CHECK(parse_duration("7d") == std::chrono::hours(24 * 7));
  CHECK(parse_duration("1.5s") == 1500ms);
  CHECK(parse_duration("0s") == 0ms);
}

TEST_CASE("duration: bad spellings are rejected with the text quoted") {
  for (const char* bad : {"", "5", "5 sex", "5sex", "s", "-1s", "1..5s", "5s ", " 5s", "1e3s", "."}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_duration(bad), oncely::ConfigError);
  }
  try {
    parse_duration("5 sex");
  } catch (const oncely::ConfigError& e) {
    CHECK(std::string(e.what()).find("'5 sex'") != std::string::npos);
  }
}

TEST_CASE("duration: format gives back what parse accepts") {
  for (const auto d : {0ms, 1ms, 1500ms, 1000ms, 60000ms, 7200000ms, 86400000ms}) {
    CAPTURE(d.count());
    CHECK(parse_duration(format_duration(d)) == d);
  }
  CHECK(format_duration(120s) == "2m");
  CHECK(format_duration(1500ms) == "1500ms");
}
