#include <doctest/doctest.h>

#include <chrono>
#include <random>

#include "execution/poll_timing.hpp"

using namespace std::chrono_literals;
using oncely::detail::jittered_poll;
using oncely::detail::kReconnectFirst;
using oncely::detail::kReconnectMax;
using oncely::detail::next_reconnect_delay;

TEST_CASE("poll_timing: the reconnect back-off doubles from 100 ms and stays at 5 s") {
  auto d = kReconnectFirst;
  for (const auto expected : {200ms, 400ms, 800ms, 1600ms, 3200ms, 5000ms, 5000ms}) {
    d = next_reconnect_delay(d);
    CHECK(d == expected);
  }
  CHECK(next_reconnect_delay(kReconnectMax) == kReconnectMax);
}

TEST_CASE("poll_timing: the poll interval's jitter stays within 10 % and spreads") {
  std::mt19937_64 rng(42);
  auto lowest = 1000ms, highest = 1000ms;
  for (int i = 0; i < 1000; ++i) {
    const auto p = jittered_poll(1000ms, rng);
    REQUIRE(p >= 900ms);
    REQUIRE(p <= 1100ms);
    lowest = std::min(lowest, p);
    highest = std::max(highest, p);
  }
  CHECK(lowest < 950ms);
  CHECK(highest > 1050ms);
  CHECK(jittered_poll(5ms, rng) == 5ms);  // under 10 ms: no room for jitter
}
