#pragma once
// LeaseQueue: a lease-mode queue (docs/semantics.md, "Lease mode"). One control thread owns
// the queue's only connection and runs cycles, each ONE short transaction that does both:
//   settle  the attempts that finished, fenced (completions with their markers and
//           database effects, retries, dead letters); a stale attempt (its lease lost)
//           changes nothing and is counted
//   claim   when there is room (the settled attempts' slots included): lease a batch of
//           ready jobs
// and commits once.
// Handlers run on handler threads (at most `concurrency`, started as needed) that never
// touch the database: a lease job holds no connection and no transaction while it runs.
// The process's LeaseKeeper renews the leases and stops a handler whose lease is lost.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pqxx/connection>
#include <spdlog/common.h>

#include "execution/executor.hpp"
#include "execution/failure_trace.hpp"
#include "execution/job_transaction.hpp"
#include "execution/lease_attempt.hpp"
#include "execution/lease_keeper.hpp"
#include "execution/queue_runner.hpp"
#include "execution/rate_limiter.hpp"
#include "execution/retry_policy.hpp"
#include "support/service_thread.hpp"
#include "store/records.hpp"

namespace oncely::detail {

class LeaseQueue final : public QueueRunner {
 public:
  /// `limiter`: the queue's rate limit, shared by its lanes (lease_lanes.hpp); null: none.
  LeaseQueue(QueueContext context, LeaseKeeper& keeper, std::shared_ptr<RateLimiter> limiter);
  ~LeaseQueue() override;
  LeaseQueue(const LeaseQueue&) = delete;
  LeaseQueue& operator=(const LeaseQueue&) = delete;

  void start() override;
  void wake_one() override;
  void wake_all() override { wake_one(); }  // one claimer
  void look_back() override;
  /// Claims nothing more; running jobs finish and settle.
  void request_stop() override;
  bool wait_stopped(std::chrono::steady_clock::time_point until) override;
  /// Stops the handlers still running, settles what finished successfully, releases the
  /// rest (no lease, ready now, the attempt not charged). False if a handler would not
  /// return or the release could not be made by `until`.
  bool abandon(std::chrono::steady_clock::time_point until) override;
  [[nodiscard]] int jobs_in_flight() const noexcept override { return in_flight_.load(); }
  [[nodiscard]] const std::string& name() const noexcept override { return context_.name; }

 private:
  /// One attempt whose handler has returned, waiting to be settled.
  struct Finished {
    std::shared_ptr<LeaseAttempt> attempt;
    std::optional<Failure> failure;  // none: completed
    std::chrono::microseconds run_time{0};
    std::shared_ptr<const ThrowTrace> trace;  // where the failure's exception was thrown
  };

  /// What a settlement wrote, reported once its transaction has committed.
  struct Settlement {
    std::vector<JobEvent> events;
    /// Its job lines: dead letters at error, retries and stale attempts at warn,
    /// completions at debug (formatted only when debug is on).
    std::vector<std::pair<spdlog::level::level_enum, std::string>> logs;
  };
  /// What a claim leased, handed to handler threads once its transaction has committed.
  struct Claim {
    std::vector<std::shared_ptr<LeaseAttempt>> attempts;
    std::vector<JobEvent> events;
    std::vector<std::string> logs, warnings;
    OutcomeCounts counts;
    int taken = 0;  // rows the claim locked: leased, deleted as duplicates, or passed over
  };
  /// What a cycle's claim did: `taken` rows of the queue (a full claim when it is the limit:
  /// more is probably waiting), of which `leased` were leased and their handlers started.
  struct Claimed {
    int taken = 0;
    int leased = 0;
  };

  void control();
  /// One short transaction: settles `batch` (fenced) and, if `claim_limit` > 0, leases up to
  /// that many jobs, one commit for both; starts the handlers of what it leased. Throws
  /// (leaving the batch to the caller) on database errors.
  Claimed cycle(pqxx::connection& conn, std::vector<Finished>& batch, int claim_limit);
  /// The settlement's statements; none when its transaction was lost (an effect's error):
  /// the caller starts over with a new one.
  std::optional<Settlement> settle_in(JobTransaction& txn, std::vector<Finished>& batch);
  /// After the commit: the settled attempts are done (renewal, running_, logs, events).
  void settled(std::vector<Finished>& batch, const Settlement& settlement);
  /// The claim's statements: lock ready jobs, lease them, dead-letter those whose last
  /// attempt's lease expired.
  Claim claim_in(pqxx::work& tx, int limit);
  /// The claim's first statement, where the queue's ClaimStart says (as Executor::claim_ready).
  std::vector<std::int64_t> lock_ready(pqxx::work& tx, int limit);
  /// After the commit: the leases go to the renewal, then their handlers start.
  Claimed start_claimed(Claim& claim);
  /// cycle() without a claim; when that fails on a working connection, each attempt alone.
  /// Throws only for a lost connection, leaving in `batch` what is still to be settled.
  void settle_or_isolate(pqxx::connection& conn, std::vector<Finished>& batch);
  /// At the end of the grace: settles what finished, releases every other lease held.
  void give_up(pqxx::connection& conn, std::chrono::steady_clock::time_point until);
  void dispatch(const std::vector<std::shared_ptr<LeaseAttempt>>& attempts);
  void handler_main();
  Finished run(LeaseAttempt& attempt);
  /// The connection, opened (and its statements prepared) if it is not.
  pqxx::connection& connection();
  std::vector<Finished> take_finished();

  QueueContext context_;
  LeaseKeeper& keeper_;
  std::shared_ptr<RateLimiter> limiter_;  // null: no rate limit
  std::mt19937_64 rng_{std::random_device{}()};
  std::unique_ptr<pqxx::connection> conn_;  // the control thread's

  // The control thread's state: claimed and not yet settled (running or finished).
  std::map<std::int64_t, std::shared_ptr<LeaseAttempt>> running_;

  std::mutex mutex_;                 // guards what follows, up to the handler threads'
  std::condition_variable control_cv_;
  std::deque<Finished> finished_;    // handler threads -> control thread
  int unfinished_ = 0;               // dispatched, not yet in finished_
  bool woken_ = false;
  bool stopping_ = false;
  bool abandoning_ = false;
  std::optional<std::chrono::steady_clock::time_point> abandon_by_;
  bool done_ = false;                // the control thread has ended
  std::condition_variable done_cv_;

  std::mutex handlers_mutex_;        // the handler threads' queue
  std::condition_variable handlers_cv_;
  std::deque<std::shared_ptr<LeaseAttempt>> ready_;  // control thread -> handler threads
  int idle_handlers_ = 0;
  // Wake-ups sent to idle handler threads that no thread has woken from yet: while one is
  // on its way, a thread that takes a job wakes nobody (handler_main).
  int wakes_pending_ = 0;
  bool closing_ = false;
  std::vector<std::thread> handler_threads_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> handlers_left_behind_{false};

  std::thread control_thread_;
};

}  // namespace oncely::detail
