// Where a job that was in flight in a dead worker runs next (suspects.hpp): as a table.
#include <doctest/doctest.h>

#include "execution/suspects.hpp"

using oncely::detail::isolated_group_for;
using oncely::detail::kFirstIsolatedGroup;
using oncely::detail::misplaced_suspects;
using oncely::detail::Suspect;
using oncely::detail::take_isolated_group;
using oncely::detail::UnfinishedAttempts;

TEST_CASE("suspects: a first crash runs anywhere; a second isolates; an isolated crash halves the group") {
  struct Row {
    int alone, crashes, narrowest_isolated;
    std::optional<int> group;
  };
  const Row table[] = {
      {0, 1, 0, std::nullopt},         // one crash beside others: most likely an outside kill
      {0, 2, 0, kFirstIsolatedGroup},  // a second crash: isolated, in the first group size
      {0, 5, 0, kFirstIsolatedGroup},
      {0, 1, 16, 8},  // crashed in an isolated group of 16: half of it
      {0, 2, 9, 4},
      {0, 1, 3, 1},
      {0, 1, 2, 1},
      {0, 1, 1, 1},  // alone: its crash counts, and it stays alone
      {1, 1, 1, 1},
      {2, 3, 1, 1},
  };
  for (const Row& row : table) {
    CAPTURE(row.alone);
    CAPTURE(row.crashes);
    CAPTURE(row.narrowest_isolated);
    CHECK(isolated_group_for({7, row.alone, row.crashes, row.narrowest_isolated}) == row.group);
  }
}

TEST_CASE("suspects: which suspects a batch may not keep") {
  const std::vector<UnfinishedAttempts> unfinished{{1, 0, 1, 0}, {2, 0, 2, 0}, {3, 0, 1, 4}};
  // Not isolated: every suspect that must be isolated goes; the first crash stays.
  const auto shared = misplaced_suspects(unfinished, 50, false);
  REQUIRE(shared.size() == 2);
  CHECK(shared[0].job_id == 2);
  CHECK(shared[0].group_at_most == kFirstIsolatedGroup);
  CHECK(shared[1].job_id == 3);
  CHECK(shared[1].group_at_most == 2);
  // An isolated group of 2: job 3 may be in it; of 3, it may not.
  CHECK(misplaced_suspects(unfinished, 2, true).empty());
  const auto three = misplaced_suspects(unfinished, 3, true);
  REQUIRE(three.size() == 1);
  CHECK(three[0].job_id == 3);
  CHECK(misplaced_suspects({}, 500, false).empty());
}

TEST_CASE("suspects: a group takes as many from the front as every member allows") {
  std::deque<Suspect> queue{{1, 4}, {2, 4}, {3, 2}, {4, 16}, {5, 1}, {6, 16}};
  CHECK(take_isolated_group(queue) == std::vector<std::int64_t>{1, 2});  // 3 allows 2 at most: not a third
  CHECK(take_isolated_group(queue) == std::vector<std::int64_t>{3, 4});
  CHECK(take_isolated_group(queue) == std::vector<std::int64_t>{5});
  CHECK(take_isolated_group(queue) == std::vector<std::int64_t>{6});
  CHECK(queue.empty());
  CHECK(take_isolated_group(queue).empty());
}
