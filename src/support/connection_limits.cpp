#include "support/connection_limits.hpp"

#include <algorithm>

namespace oncely::detail {
namespace {

constexpr std::int64_t kMinReserve = 64;
constexpr std::int64_t kMinConnections = 8;
constexpr std::int64_t kMaxConnections = 128;

}  // namespace

FdBudget fd_budget(std::int64_t limit) noexcept {
  const std::int64_t reserve = std::min(std::max(kMinReserve, limit / 4), limit / 2);
  const std::int64_t connections = std::clamp((limit - reserve) / 4, kMinConnections, kMaxConnections);
  return FdBudget{reserve, static_cast<std::size_t>(connections)};
}

Admission admit_connection(std::int64_t open_fds, std::int64_t limit, std::size_t held,
                           const FdBudget& budget) noexcept {
  if (open_fds < 0 || open_fds > limit - budget.reserve) return Admission::refuse;
  return held >= budget.max_connections ? Admission::admit_evict_oldest : Admission::admit;
}

}  // namespace oncely::detail
