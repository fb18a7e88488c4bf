#include "execution/claim_start.hpp"

#include <algorithm>
#include <tuple>

namespace oncely::detail {

bool claim_key_before(const ClaimKey& a, const ClaimKey& b) {
  return std::tie(a.priority, a.run_at_us, a.id) < std::tie(b.priority, b.run_at_us, b.id);
}

bool ClaimStart::head_allowed(Clock::time_point now, bool periodic) const {
  if (head_in_flight_) return false;
  // Jobs given back are ready at once, before the start: not worth waiting for.
  if (rewound_) return true;
  // The pace: never more than 1/kHeadShare of the time in claims from the head.
  if (now < last_head_end_ + kHeadShare * last_head_took_) return false;
  return !periodic || now >= last_head_end_ + kHeadEvery;
}

void ClaimStart::begin_head() {
  head_in_flight_ = true;
  if (owed_) {
    owed_head_running_ = true;
    owed_waiter_ = {};
  }
}

ClaimStart::Turn ClaimStart::next(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (head_allowed(now, start_.has_value() && !owed_)) {
    begin_head();
    return {Turn::Kind::from_head};
  }
  if (!start_) return {head_in_flight_ ? Turn::Kind::head_too : Turn::Kind::none};
  return {Turn::Kind::after_start, *start_};
}

bool ClaimStart::take_head(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (!head_allowed(now, /*periodic=*/false)) {
    // What this claim did not find after the start may be before it, committed after a
    // head claim under way began: the head is owed (again).
    owed_ = true;
    owed_head_running_ = false;
    return false;
  }
  begin_head();
  return true;
}

void ClaimStart::owe_head() {
  std::lock_guard lock(mutex_);
  owed_ = true;
  owed_head_running_ = false;  // one under way began before: it may not see them
}

std::optional<ClaimStart::Clock::time_point> ClaimStart::owed_head_due(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (!owed_ || owed_head_running_) return std::nullopt;
  const std::thread::id me = std::this_thread::get_id();
  if (owed_waiter_ != std::thread::id{} && owed_waiter_ != me) return std::nullopt;
  owed_waiter_ = me;
  // Another claim from the head under way: come back about when it ends.
  if (head_in_flight_) return now + std::max<Clock::duration>(last_head_took_, std::chrono::milliseconds(1));
  return std::max(now, last_head_end_ + kHeadShare * last_head_took_);
}

void ClaimStart::claimed_after_start(const ClaimKey& last) {
  std::lock_guard lock(mutex_);
  if (!start_ || claim_key_before(*start_, last)) start_ = last;
}

void ClaimStart::claimed_from_head(const std::optional<ClaimKey>& last, Clock::duration took, Clock::time_point end) {
  std::lock_guard lock(mutex_);
  head_in_flight_ = false;
  rewound_ = false;
  if (owed_head_running_) owed_ = owed_head_running_ = false;
  last_head_end_ = end;
  last_head_took_ = took;
  // What the head claim found is where claims go on from, even when it is before the start:
  // a more urgent level, or jobs given back, with the rest of the queue after them.
  if (last) start_ = last;
}

void ClaimStart::head_failed(Clock::time_point end) {
  std::lock_guard lock(mutex_);
  head_in_flight_ = false;
  owed_head_running_ = false;  // still owed
  last_head_end_ = end;
}

void ClaimStart::rewind() {
  std::lock_guard lock(mutex_);
  rewound_ = true;
}

}  // namespace oncely::detail
