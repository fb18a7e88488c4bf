#include "execution/suspects.hpp"

#include <algorithm>
#include <limits>

namespace oncely::detail {

std::optional<int> isolated_group_for(const UnfinishedAttempts& unfinished) {
  if (unfinished.alone > 0 || unfinished.narrowest_isolated == 1) return 1;
  if (unfinished.narrowest_isolated > 1) return unfinished.narrowest_isolated / 2;
  if (unfinished.crashes >= 2) return kFirstIsolatedGroup;
  return std::nullopt;
}

std::vector<Suspect> misplaced_suspects(const std::vector<UnfinishedAttempts>& unfinished, std::size_t batch_size,
                                        bool isolated) {
  std::vector<Suspect> misplaced;
  for (const UnfinishedAttempts& u : unfinished) {
    const std::optional<int> group = isolated_group_for(u);
    if (group && (!isolated || batch_size > static_cast<std::size_t>(*group))) misplaced.push_back({u.job_id, *group});
  }
  return misplaced;
}

std::vector<std::int64_t> take_isolated_group(std::deque<Suspect>& queue) {
  std::vector<std::int64_t> group;
  int at_most = std::numeric_limits<int>::max();
  while (!queue.empty()) {
    const int allowed = std::min(at_most, queue.front().group_at_most);
    if (static_cast<int>(group.size()) >= allowed) break;
    at_most = allowed;
    group.push_back(queue.front().job_id);
    queue.pop_front();
  }
  return group;
}

}  // namespace oncely::detail
