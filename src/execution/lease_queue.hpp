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
#include <string>
#include <thread>
#include <vector>

#include <pqxx/connection>

#include "execution/handler_threads.hpp"
#include "execution/job_transaction.hpp"
#include "execution/lease_attempt.hpp"
#include "execution/lease_keeper.hpp"
#include "execution/lease_transaction.hpp"
#include "execution/queue_context.hpp"
#include "execution/queue_runner.hpp"
#include "execution/rate_limiter.hpp"
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
  /// What a cycle's claim did: `taken` rows of the queue (a full claim when it is the limit:
  /// more is probably waiting), of which `leased` were leased and their handlers started.
  struct Claimed {
    int taken = 0;
    int leased = 0;
    std::optional<std::chrono::milliseconds> retry_in;  // LeaseClaim::retry_in
  };

  void control();
  /// One short transaction: settles `batch` (fenced) and, if `claim_limit` > 0, leases up to
  /// that many jobs, one commit for both; starts the handlers of what it leased. Throws
  /// (leaving the batch to the caller) on database errors.
  Claimed cycle(pqxx::connection& conn, std::vector<FinishedAttempt>& batch, int claim_limit);
  /// After the commit: the settled attempts are done (renewal, running_, events).
  void settled(std::vector<FinishedAttempt>& batch, const std::vector<JobEvent>& events);
  /// After the commit: the leases go to the renewal, then their handlers start.
  Claimed start_claimed(LeaseClaim& claim);
  /// cycle() without a claim; when that fails on a working connection, each attempt alone.
  /// Throws only for a lost connection, leaving in `batch` what is still to be settled.
  void settle_or_isolate(pqxx::connection& conn, std::vector<FinishedAttempt>& batch);
  /// At the end of the grace: settles what finished, releases every other lease held.
  void give_up(pqxx::connection& conn, std::chrono::steady_clock::time_point until);
  void dispatch(const std::vector<std::shared_ptr<LeaseAttempt>>& attempts);
  /// On a handler thread: runs the attempt's handler, hands the outcome to the control thread.
  void run(std::shared_ptr<LeaseAttempt> attempt);
  /// The connection, opened (and its statements prepared) if it is not.
  pqxx::connection& connection();
  std::vector<FinishedAttempt> take_finished();

  QueueContext context_;
  LeaseKeeper& keeper_;
  std::shared_ptr<RateLimiter> limiter_;    // null: no rate limit
  std::unique_ptr<pqxx::connection> conn_;  // the control thread's

  // The control thread's state: claimed and not yet settled (running or finished), by lease
  // token: a job may be leased again while an attempt of its expired lease still runs.
  std::map<std::int64_t, std::shared_ptr<LeaseAttempt>> running_;

  std::mutex mutex_;  // guards what follows, up to the handler threads'
  std::condition_variable control_cv_;
  std::deque<FinishedAttempt> finished_;  // handler threads -> control thread
  int unfinished_ = 0;                    // dispatched, not yet in finished_
  bool woken_ = false;
  bool stopping_ = false;
  bool abandoning_ = false;
  std::optional<std::chrono::steady_clock::time_point> abandon_by_;
  bool done_ = false;  // the control thread has ended
  std::condition_variable done_cv_;

  std::atomic<int> in_flight_{0};
  std::atomic<bool> handlers_left_behind_{false};

  // After what its threads use (above), so that they end first.
  HandlerThreads handler_threads_{context_.config.concurrency,
                                  [this](std::shared_ptr<LeaseAttempt> a) { run(std::move(a)); }};
  std::thread control_thread_;
};

}  // namespace oncely::detail
