#pragma once
// EventRecorder: collects the runtime's JobEvents; tests wait on counts, never sleep.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include <doctest/doctest.h>

#include "oncely/runtime.hpp"

namespace oncely::test {

class EventRecorder {
 public:
  std::function<void(const JobEvent&)> callback() {
    return [this](const JobEvent& e) {
      {
        std::lock_guard lock(mutex_);
        events_.push_back(e);
      }
      changed_.notify_all();
    };
  }

  /// Waits until at least `n` events with `outcome` were seen; false on timeout.
  bool wait_for(JobEvent::Outcome outcome, std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return count_locked(outcome) >= n; });
  }

  std::size_t count(JobEvent::Outcome outcome) {
    std::lock_guard lock(mutex_);
    return count_locked(outcome);
  }

  std::vector<JobEvent> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  std::size_t count_locked(JobEvent::Outcome outcome) const {
    std::size_t n = 0;
    for (const auto& e : events_) n += e.outcome == outcome ? 1 : 0;
    return n;
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<JobEvent> events_;
};

/// Runs a Runtime on a background thread for the scope of a test; stops and joins at the end.
class RunningRuntime {
 public:
  explicit RunningRuntime(Runtime& runtime)
      : runtime_(runtime), thread_([this] {
          try {
            exit_code_ = runtime_.run();
          } catch (const std::exception& e) {
            error_ = e.what();
            exit_code_ = -2;
          }
        }) {}
  ~RunningRuntime() { stop(); }
  int stop() {
    runtime_.request_stop();
    if (thread_.joinable()) thread_.join();
    if (!error_.empty()) FAIL_CHECK("Runtime::run() threw: " << error_);
    return exit_code_;
  }

 private:
  Runtime& runtime_;
  int exit_code_ = -1;
  std::string error_;
  std::thread thread_;
};

}  // namespace oncely::test
