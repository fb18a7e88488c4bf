#pragma once
// The timing both claim loops (queue_pool.cpp, lease_queue.cpp) share: how long to wait
// before reconnecting after a lost connection, and the poll interval's jitter. Pure.

#include <algorithm>
#include <chrono>
#include <random>

namespace oncely::detail {

/// Reconnect back-off after a lost connection: 100 ms, doubling to 5 s.
inline constexpr auto kReconnectFirst = std::chrono::milliseconds(100);
inline constexpr auto kReconnectMax = std::chrono::milliseconds(5000);

/// The back-off after `delay`: twice it, at most kReconnectMax.
[[nodiscard]] constexpr std::chrono::milliseconds next_reconnect_delay(std::chrono::milliseconds delay) noexcept {
  return std::min(delay * 2, kReconnectMax);
}

/// `poll` ±10 % (uniform, whole milliseconds), so that workers polling the same queue
/// drift apart instead of claiming in lockstep.
template <class Rng>
[[nodiscard]] std::chrono::milliseconds jittered_poll(std::chrono::milliseconds poll, Rng& rng) {
  std::uniform_int_distribution<long> spread(-poll.count() / 10, poll.count() / 10);
  return poll + std::chrono::milliseconds(spread(rng));
}

}  // namespace oncely::detail
