#pragma once
// QueuePool: one queue's worker threads. Each thread owns its connections and loops:
// wait for a wake-up (NOTIFY via the listener, a peer's hand-off, or the poll interval),
// run batches while they come back full, hand off to a peer when there is more.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "execution/executor.hpp"
#include "execution/queue_runner.hpp"
#include "execution/rate_limiter.hpp"

namespace oncely::detail {

class QueuePool final : public QueueRunner {
 public:
  explicit QueuePool(QueueContext context);
  ~QueuePool();
  QueuePool(const QueuePool&) = delete;
  QueuePool& operator=(const QueuePool&) = delete;

  void start() override;
  /// Wakes one idle worker (jobs were inserted).
  void wake_one() override;
  void wake_all() override;
  void look_back() override;
  /// No new batches; running ones stop starting handlers and commit what they finished.
  void request_stop() override;
  /// Waits until every worker has exited or `until` passes; returns whether all exited.
  bool wait_stopped(std::chrono::steady_clock::time_point until) override;
  /// Asks the handlers still running to end now (their JobContext stop token; the exec
  /// handler terminates its processes) and detaches the workers: their transactions roll
  /// back when the process exits. Returns false (threads are left behind).
  bool abandon(std::chrono::steady_clock::time_point until) override;

  [[nodiscard]] int jobs_in_flight() const noexcept override { return in_flight_.load(); }
  [[nodiscard]] const std::string& name() const noexcept override { return context_.name; }

 private:
  void worker_main(const std::stop_token& stop, int index);
  /// A worker thread's loop: batches while there is work, recovery after errors.
  void work(const std::stop_token& stop, int index, WorkerConnections& conns);
  bool wait_for_work(const std::stop_token& stop, std::chrono::milliseconds timeout);
  void connect(WorkerConnections& c) const;
  /// Waits for the rate limit to allow at least one job; returns how many (0 if stopped).
  int take_allowance(const std::stop_token& stop, int wanted);

  QueueContext context_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  int wakeups_ = 0;  // pending wake-ups, at most one per worker
  std::atomic<int> in_flight_{0};
  std::stop_source abandon_;
  std::atomic<int> running_{0};
  std::condition_variable_any exited_;
  std::unique_ptr<RateLimiter> limiter_;  // null: no rate limit
  std::vector<std::jthread> threads_;
};

}  // namespace oncely::detail
