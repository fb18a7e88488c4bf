#include <doctest/doctest.h>

#include <thread>

#include "execution/claim_start.hpp"

using oncely::detail::ClaimKey;
using oncely::detail::ClaimStart;
using Kind = ClaimStart::Turn::Kind;
using namespace std::chrono_literals;

namespace {

ClaimKey key(std::int64_t id, int priority = 0) { return {.priority = priority, .run_at_us = id * 10, .id = id}; }

}  // namespace

TEST_CASE("claim_start: the first claim is from the head, and so are the others made before a start is known") {
  ClaimStart start;
  const ClaimStart::Clock::time_point t{};
  CHECK(start.next(t).kind == Kind::from_head);
  CHECK(start.next(t).kind == Kind::head_too);  // at start-up nobody waits for the first
  start.claimed_from_head(key(500), 1ms, t + 1ms);
  const ClaimStart::Turn turn = start.next(t + 1ms);
  CHECK(turn.kind == Kind::after_start);
  CHECK(turn.after.id == 500);
}

TEST_CASE("claim_start: claims go on after the furthest job any thread claimed, full or not") {
  ClaimStart start;
  ClaimStart::Clock::time_point t{};
  (void)start.next(t);
  start.claimed_from_head(key(100), 1ms, t);
  start.claimed_after_start(key(300));
  start.claimed_after_start(key(200));  // another thread's claim, made from the older start
  t += 10ms;
  CHECK(start.next(t).after.id == 300);
}

TEST_CASE("claim_start: a periodic claim from the head, one at a time") {
  ClaimStart start;
  ClaimStart::Clock::time_point t{};
  (void)start.next(t);
  start.claimed_from_head(key(100), 1ms, t);
  CHECK(start.next(t + 499ms).kind == Kind::after_start);
  CHECK(start.next(t + 500ms).kind == Kind::from_head);
  CHECK(start.next(t + 500ms).kind == Kind::after_start);  // one thread walks the head at a time
  CHECK_FALSE(start.take_head(t + 500ms));
}

TEST_CASE("claim_start: when the head is cheap, a claim that found nothing after the start goes there at once") {
  ClaimStart start;
  ClaimStart::Clock::time_point t{};
  (void)start.next(t);
  start.claimed_from_head(key(100), 200us, t);
  CHECK(start.take_head(t + 5ms));  // 20 x 200 us later
  start.claimed_from_head(key(50), 200us, t + 5ms);
  CHECK(start.next(t + 6ms).after.id == 50);  // the head's find is where claims go on from
}

TEST_CASE("claim_start: claims from the head that got slow (dead index entries vacuum may not remove) are paced") {
  // Each row: how long the last claim from the head took, and when the next may go there.
  struct Row {
    ClaimStart::Clock::duration took;
    ClaimStart::Clock::duration after_nothing;  // take_head() after a claim found nothing
    ClaimStart::Clock::duration periodic;       // next() goes to the head by itself
  };
  const Row rows[] = {
      {100us, 2ms, 500ms},
      {10ms, 200ms, 500ms},
      {100ms, 2s, 2s},
      {1s, 20s, 20s},
  };
  for (const Row& row : rows) {
    CAPTURE(row.took.count());
    ClaimStart start;
    const ClaimStart::Clock::time_point t{};
    (void)start.next(t);
    start.claimed_from_head(key(100), row.took, t);
    CHECK(start.next(t + row.periodic - 1us).kind == Kind::after_start);
    CHECK(start.next(t + row.periodic).kind == Kind::from_head);
    start.claimed_from_head(key(100), row.took, t + row.periodic);
    CHECK_FALSE(start.take_head(t + row.periodic + row.after_nothing - 1us));
    CHECK(start.take_head(t + row.periodic + row.after_nothing));
  }
}

TEST_CASE("claim_start: a claim from the head that is owed is made at the pace, by one idle claimer coming back") {
  ClaimStart start;
  ClaimStart::Clock::time_point t{};
  (void)start.next(t);
  start.claimed_from_head(key(100), 10ms, t);       // pace: 200 ms
  CHECK_FALSE(start.owed_head_due(t).has_value());  // nothing owed: idle claimers wait for a wake-up

  SUBCASE("a claim that found nothing after the start was refused the head") { CHECK_FALSE(start.take_head(t + 1ms)); }
  SUBCASE("the listener's second wake-up: jobs may have committed before the start") { start.owe_head(); }
  // One idle claimer comes back for it when the pace allows, the others need not.
  const auto due = start.owed_head_due(t + 1ms);
  REQUIRE(due.has_value());
  CHECK(*due == t + 200ms);
  CHECK(start.owed_head_due(t + 1ms) == due);  // the same claimer asking again
  std::optional<ClaimStart::Clock::time_point> others = t;
  std::thread([&] { others = start.owed_head_due(t + 1ms); }).join();
  CHECK_FALSE(others.has_value());
  // Not before the pace, but then by any claim, not only every kHeadEvery (500 ms).
  CHECK(start.next(t + 199ms).kind == Kind::after_start);
  CHECK(start.next(t + 200ms).kind == Kind::from_head);
  CHECK_FALSE(start.owed_head_due(t + 200ms).has_value());  // under way, and it began after the owe
  start.claimed_from_head(std::nullopt, 10ms, t + 210ms);
  CHECK_FALSE(start.owed_head_due(t + 210ms).has_value());  // paid
  CHECK(start.next(t + 450ms).kind == Kind::after_start);   // periodic again
}

TEST_CASE("claim_start: a head claim under way when the head is owed does not pay it; a failed one does not either") {
  ClaimStart start;
  ClaimStart::Clock::time_point t{};
  (void)start.next(t);
  start.claimed_from_head(key(100), 1ms, t);
  REQUIRE(start.next(t + 500ms).kind == Kind::from_head);  // periodic, under way
  start.owe_head();                                        // began before the owe
  const auto due = start.owed_head_due(t + 501ms);
  REQUIRE(due.has_value());
  CHECK(*due == t + 502ms);  // about when the one under way ends
  start.claimed_from_head(std::nullopt, 1ms, t + 501ms);
  CHECK(start.owed_head_due(t + 502ms).has_value());  // still owed
  CHECK(start.next(t + 521ms).kind == Kind::from_head);
  start.head_failed(t + 522ms);
  CHECK(start.owed_head_due(t + 522ms).has_value());  // still owed
  CHECK(start.next(t + 542ms).kind == Kind::from_head);
  start.claimed_from_head(std::nullopt, 1ms, t + 543ms);
  CHECK_FALSE(start.owed_head_due(t + 543ms).has_value());
}

TEST_CASE("claim_start: jobs given back send the next claim to the head at once, whatever the pace") {
  ClaimStart start;
  ClaimStart::Clock::time_point t{};
  (void)start.next(t);
  start.claimed_from_head(key(100), 100ms, t);
  CHECK(start.next(t + 1ms).kind == Kind::after_start);  // paced: 20 x 100 ms
  start.rewind();
  CHECK(start.next(t + 1ms).kind == Kind::from_head);
  CHECK(start.next(t + 1ms).kind == Kind::after_start);     // one at a time still
  start.claimed_from_head(std::nullopt, 100ms, t + 101ms);  // the head found nothing: the start stays
  CHECK(start.next(t + 102ms).after.id == 100);
  CHECK(start.next(t + 2101ms).kind == Kind::from_head);  // and the pace is back
}

TEST_CASE("claim_start: with no start known and the head paced, a claim waits") {
  ClaimStart start;
  const ClaimStart::Clock::time_point t{};
  (void)start.next(t);
  start.claimed_from_head(std::nullopt, 100ms, t + 100ms);  // nothing there, and slow
  CHECK(start.next(t + 200ms).kind == Kind::none);
  CHECK(start.next(t + 2100ms).kind == Kind::from_head);
}

TEST_CASE("claim_start: a failed claim from the head frees the turn") {
  ClaimStart start;
  const ClaimStart::Clock::time_point t{};
  CHECK(start.next(t).kind == Kind::from_head);
  start.head_failed(t + 1ms);
  CHECK(start.next(t + 1ms).kind == Kind::from_head);
}
