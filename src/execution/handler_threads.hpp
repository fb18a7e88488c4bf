#pragma once
// HandlerThreads: a lease queue's handler threads, at most `max_threads`, started as jobs
// come and kept for the next ones. They never touch the database: each takes an attempt and
// calls `run` with it (LeaseQueue runs the handler and hands the outcome to its control
// thread).
//
// Waking policy: one idle thread is woken per dispatch; each thread that takes a job wakes
// the next while jobs are left, unless a wake-up is on its way already. Long jobs all
// start; short ones are run by the few threads that are awake (a thread whose job ended
// takes the next without waiting), not at the cost of a wake-up and a context switch each.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace oncely::detail {

struct LeaseAttempt;

class HandlerThreads {
 public:
  using Run = std::function<void(std::shared_ptr<LeaseAttempt>)>;

  HandlerThreads(int max_threads, Run run) : max_threads_(max_threads), run_(std::move(run)) {}
  ~HandlerThreads() { close(); }
  HandlerThreads(const HandlerThreads&) = delete;
  HandlerThreads& operator=(const HandlerThreads&) = delete;

  /// Queues `attempts` for the threads, starting threads as needed (up to max_threads).
  void dispatch(const std::vector<std::shared_ptr<LeaseAttempt>>& attempts);
  /// Lets the threads finish their jobs and end; joins them. Jobs still queued are dropped.
  void close();
  /// Leaves the threads behind (handlers that would not return): the process exits under them.
  void detach();

 private:
  void thread_main();

  const int max_threads_;
  const Run run_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<LeaseAttempt>> ready_;
  int idle_ = 0;
  // Wake-ups sent to idle threads that no thread has woken from yet: while one is on its
  // way, a thread that takes a job wakes nobody.
  int wakes_pending_ = 0;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace oncely::detail
