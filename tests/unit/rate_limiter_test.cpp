#include <doctest/doctest.h>

#include "execution/rate_limiter.hpp"

using oncely::detail::RateLimiter;
using namespace std::chrono_literals;

namespace {

struct FakeClock {
  RateLimiter::Clock::time_point t{};
  std::function<RateLimiter::Clock::time_point()> fn() {
    return [this] { return t; };
  }
};

}  // namespace

TEST_CASE("rate_limiter: starts with one second of tokens, then refills at the rate") {
  FakeClock clock;
  RateLimiter limiter(200, clock.fn());
  CHECK(limiter.try_take(500) == 200);
  CHECK(limiter.try_take(1) == 0);
  clock.t += 100ms;
  CHECK(limiter.try_take(500) == 20);
  clock.t += 10s;  // never more than one second's worth
  CHECK(limiter.try_take(1000) == 200);
}

TEST_CASE("rate_limiter: over any window the starts stay within rate x window + burst") {
  FakeClock clock;
  RateLimiter limiter(50, clock.fn());
  int taken = 0;
  for (int step = 0; step < 1000; ++step) {  // 10 s in 10 ms steps, always asking for more
    taken += limiter.try_take(7);
    clock.t += 10ms;
  }
  CHECK(taken <= 50 * 10 + 50);
  CHECK(taken >= 50 * 10 - 1);
}

TEST_CASE("rate_limiter: a rate below one per second still lets a job through, then waits") {
  FakeClock clock;
  RateLimiter limiter(0.5, clock.fn());
  CHECK(limiter.try_take(5) == 1);
  CHECK(limiter.try_take(5) == 0);
  CHECK(limiter.time_until_available() > 1900ms);
  CHECK(limiter.time_until_available() <= 2001ms);
  clock.t += 2s;
  CHECK(limiter.time_until_available() == 0ns);
  CHECK(limiter.try_take(5) == 1);
}

TEST_CASE("rate_limiter: tokens given back can be taken again") {
  FakeClock clock;
  RateLimiter limiter(10, clock.fn());
  CHECK(limiter.try_take(10) == 10);
  limiter.give_back(4);
  CHECK(limiter.try_take(10) == 4);
}
