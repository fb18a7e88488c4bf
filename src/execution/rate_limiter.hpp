#pragma once
// RateLimiter: a token bucket for one queue in one process (rate_limit_per_sec). Workers
// take tokens *before* they claim, and claim at most as many jobs as they got, so no job
// transaction is ever held open waiting for the limit. The bucket holds up to one second
// of tokens (at least one), so a quiet queue may start a one-second burst at once.
// Thread-safe. Pure: the clock is passed in.

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>

namespace oncely::detail {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RateLimiter(double per_second, std::function<Clock::time_point()> now = Clock::now)
      : rate_(per_second),
        capacity_(std::max(1.0, per_second)),
        tokens_(capacity_),
        now_(std::move(now)),
        last_(now_()) {}

  /// Takes up to `max` whole tokens; returns how many (0 when none is available yet).
  int try_take(int max) {
    std::lock_guard lock(mutex_);
    refill();
    // Compared as doubles: a bucket of more tokens than an int holds must not overflow the cast.
    const int taken = static_cast<int>(std::min(static_cast<double>(max), tokens_));
    tokens_ -= taken;
    return std::max(taken, 0);
  }

  /// Returns tokens taken but not used (the claim found fewer jobs).
  void give_back(int n) {
    std::lock_guard lock(mutex_);
    tokens_ = std::min(capacity_, tokens_ + n);
  }

  /// How long until one whole token is available (zero if one is).
  std::chrono::nanoseconds time_until_available() {
    std::lock_guard lock(mutex_);
    refill();
    if (tokens_ >= 1.0) return std::chrono::nanoseconds(0);
    // At most an hour, then the caller asks again: for a tiny rate (Config allows none below
    // 0.001/s) the wait in nanoseconds would overflow the cast, come out negative, and the
    // caller would spin.
    const double wait_ns = std::min((1.0 - tokens_) / rate_ * 1e9, kMaxWaitNs);
    return std::chrono::nanoseconds(static_cast<long long>(wait_ns) + 1);
  }

 private:
  void refill() {
    const auto now = now_();
    tokens_ = std::min(capacity_, tokens_ + std::chrono::duration<double>(now - last_).count() * rate_);
    last_ = now;
  }

  static constexpr double kMaxWaitNs = 3600e9;

  std::mutex mutex_;
  double rate_;
  double capacity_;
  double tokens_;
  std::function<Clock::time_point()> now_;
  Clock::time_point last_;
};

}  // namespace oncely::detail
