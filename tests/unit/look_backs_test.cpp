#include <doctest/doctest.h>

#include "process/look_backs.hpp"

using oncely::detail::LookBacks;
using namespace std::chrono_literals;
using Strings = std::vector<std::string>;

TEST_CASE(
    "look_backs: a queue is due 10 ms after the last notification naming it, and looks when NOTIFYs were skipped") {
  LookBacks look_backs({"a", "b"});
  const LookBacks::Clock::time_point t{};
  CHECK_FALSE(look_backs.next_due().has_value());

  look_backs.notified("a", t);
  look_backs.notified("elsewhere", t);  // a queue of another process: not followed
  look_backs.notified("a", t + 4ms);    // a later notification puts it off
  CHECK(look_backs.next_due() == t + 14ms);
  CHECK(look_backs.take_due(t + 13ms, 0).empty());
  CHECK(look_backs.take_due(t + 14ms, 0) == Strings{"a"});  // never looked: it looks
  CHECK_FALSE(look_backs.next_due().has_value());

  // Each row: the count of skipped NOTIFYs read when the queue is due, and whether it looks.
  struct Row {
    std::optional<std::int64_t> skipped;
    bool looks;
  };
  const Row rows[] = {
      {0, false},            // none skipped since it last looked
      {3, true},             // three skipped since
      {3, false},            // none since
      {std::nullopt, true},  // the count could not be read
      {3, true},             // nor at the last decision: look
      {3, false},
  };
  auto now = t + 100ms;
  for (const Row& row : rows) {
    CAPTURE(row.skipped.value_or(-1));
    look_backs.notified("a", now);
    now += 10ms;
    CHECK(look_backs.take_due(now, row.skipped) == (row.looks ? Strings{"a"} : Strings{}));
  }
}

TEST_CASE("look_backs: '*' names every queue of the process, each with its own count") {
  LookBacks look_backs({"a", "b"});
  const LookBacks::Clock::time_point t{};
  look_backs.notified("a", t);
  CHECK(look_backs.take_due(t + 10ms, 5) == Strings{"a"});
  look_backs.notified("*", t + 20ms);
  CHECK(look_backs.take_due(t + 30ms, 5) == Strings{"b"});  // a saw 5 already; b never looked
}
