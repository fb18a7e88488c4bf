#pragma once
// Where a queue's claims start, shared by the queue's threads in this process.
//
// The index entries of jobs that are done stay in the claim index until vacuum removes
// them, and they sit at its head: a claim from the head walks every one of them. While
// something holds back the xmin horizon (a long report, pg_dump, an idle transaction that
// took an xid), vacuum can remove none, and a claim from the head walks every job done
// since: a few milliseconds a claim after a minute at a few hundred jobs a second, a
// second each with dozens of threads doing it at once. So claims start after the furthest
// job any of the queue's threads has claimed, and only one claim at a time goes to the
// head, at most once per kHeadEvery and never for more than about 1/kHeadShare of the
// time: a head claim that took 100 ms waits 2 s for the next one.
//
// A ready job that belongs before the start is found by the next claim from the head:
// released or rolled back by a batch, inserted with an earlier run_at (a long producer
// transaction: run_at defaults to its start), committed after a job enqueued after it (ids
// and run_at are taken at the INSERT, visibility at the COMMIT), or at a more urgent
// priority level than the start's. While head claims are cheap (vacuum can do its work) a
// claim that found nothing after the start goes to the head at once, as every claim did
// before. When the pace refuses it, or when jobs may have committed before the start with
// no NOTIFY of their own (the listener's second wake-up, store/wakeup_window.hpp), a claim
// from the head is owed: the next claim that the pace allows goes there, and one idle
// claimer comes back for it when the pace allows (owed_head_due), not at its next poll.
//
// Pure bookkeeping under a mutex; the caller passes the time and makes the claims.
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "store/records.hpp"

namespace oncely::detail {

class ClaimStart {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kHeadEvery = std::chrono::milliseconds(500);
  static constexpr int kHeadShare = 20;

  /// The claim to make now: after `after`; from the head (the caller then reports it with
  /// claimed_from_head() or head_failed()); from the head as well, while another thread's
  /// claim from the head is under way and no start is known yet (reported as a claim after
  /// the start: at start-up every thread claims at once, none waits for the first); or none
  /// at all (no start is known and the head is not due: wait for the next wake-up).
  struct Turn {
    enum class Kind { after_start, from_head, head_too, none } kind = Kind::none;
    ClaimKey after{};
  };
  Turn next(Clock::time_point now);

  /// After a claim after the start found nothing: whether this caller may claim from the
  /// head now (then it must report it with claimed_from_head()). When not, one is owed.
  bool take_head(Clock::time_point now);

  /// Jobs may have committed before the start with no wake-up of their own: a claim from
  /// the head is owed (made at the usual pace, not only every kHeadEvery).
  void owe_head();
  /// For a claimer going idle: when to come back to make the owed claim from the head.
  /// nullopt when none is owed, when one that began after it was owed is under way, or
  /// when another claimer is coming back for it (one is enough).
  std::optional<Clock::time_point> owed_head_due(Clock::time_point now);

  /// A claim after the start came back with jobs, the last at `last` in claim order.
  void claimed_after_start(const ClaimKey& last);
  /// A claim from the head ended at `end`, after `took`; `last`: its last job, if any.
  void claimed_from_head(const std::optional<ClaimKey>& last, Clock::duration took, Clock::time_point end);
  /// A claim from the head failed: another may be made (at the usual pace).
  void head_failed(Clock::time_point end);

  /// Jobs were given back (a batch released or rolled back): they are before the start,
  /// so the next claim goes to the head, unpaced (they are ready now, and this is rare).
  void rewind();

 private:
  /// periodic: a start is known, so the head is due only every kHeadEvery (or after a rewind).
  bool head_allowed(Clock::time_point now, bool periodic) const;
  /// A claim from the head begins now.
  void begin_head();

  std::mutex mutex_;
  std::optional<ClaimKey> start_;
  bool head_in_flight_ = false;
  bool rewound_ = false;
  bool owed_ = false;               // a claim from the head is owed
  bool owed_head_running_ = false;  // ... and the one under way began after it was owed
  std::thread::id owed_waiter_;     // the idle claimer coming back for it (none: default)
  Clock::time_point last_head_end_{};
  Clock::duration last_head_took_{};
};

/// Claim order: (priority, run_at, id).
bool claim_key_before(const ClaimKey& a, const ClaimKey& b);

/// Makes one claim where `start` says and tells it what came of it: `claim(after)` claims
/// after `after` (nullopt: from the head) and returns what it claimed, `last(claimed)` the
/// claim-order key of the last job claimed (nullopt: none, or no key). Nothing is claimed
/// (an empty result) when the start says to wait. `observe`, when set, is told how long each
/// claim statement took (oncely_claim_seconds): a claim that walks dead index entries shows
/// there first.
template <class ClaimFn, class LastFn>
auto claim_at(ClaimStart& start, ClaimFn&& claim, LastFn&& last,
              const std::function<void(ClaimStart::Clock::duration)>& observe = {})
    -> decltype(claim(std::optional<ClaimKey>{})) {
  using Clock = ClaimStart::Clock;
  const auto timed = [&](const std::optional<ClaimKey>& after, Clock::time_point began) {
    auto claimed = claim(after);
    if (observe) observe(Clock::now() - began);
    return claimed;
  };
  const auto from_head = [&] {
    const auto began = Clock::now();
    try {
      auto claimed = timed(std::nullopt, began);
      const auto ended = Clock::now();
      start.claimed_from_head(last(claimed), ended - began, ended);
      return claimed;
    } catch (...) {
      start.head_failed(Clock::now());
      throw;
    }
  };
  const ClaimStart::Turn turn = start.next(Clock::now());
  if (turn.kind == ClaimStart::Turn::Kind::from_head) return from_head();
  if (turn.kind == ClaimStart::Turn::Kind::none) return {};
  auto claimed = timed(
      turn.kind == ClaimStart::Turn::Kind::head_too ? std::optional<ClaimKey>{} : std::optional<ClaimKey>{turn.after},
      Clock::now());
  if (const std::optional<ClaimKey> key = last(claimed)) {
    start.claimed_after_start(*key);
    return claimed;
  }
  // Nothing after the start (or nothing with a key): whatever is ready is before it.
  if (claimed.empty() && start.take_head(Clock::now())) return from_head();
  return claimed;
}

}  // namespace oncely::detail
