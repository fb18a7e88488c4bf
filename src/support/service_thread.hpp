#pragma once
// ServiceThread: a std::jthread that can be given up on. Joining a thread stuck in a call
// that has no deadline of its own (a libpq call behind a network partition) would hang a
// shutdown for ever; stop_until() waits only until a deadline and then detaches it.
// pause_for(): the one stoppable sleep every service loop uses.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>

namespace oncely::detail {

/// Sleeps for `d`, cut short when `stop` is requested. True: the whole time passed; false:
/// stopped (before or during the sleep).
template <class Rep, class Period>
bool pause_for(const std::stop_token& stop, std::chrono::duration<Rep, Period> d) {
  std::mutex mutex;
  std::condition_variable_any cv;  // nothing notifies it: only the stop request wakes it early
  std::unique_lock lock(mutex);
  return !cv.wait_for(lock, stop, d, [] { return false; }) && !stop.stop_requested();
}

class ServiceThread {
 public:
  ServiceThread() = default;
  /// Runs `body(stop_token)` on a new thread; body must not throw.
  template <class Body>
  explicit ServiceThread(Body body) : state_(std::make_shared<State>()) {
    thread_ = std::jthread([state = state_, body = std::move(body)](const std::stop_token& stop) mutable {
      body(stop);
      {
        std::lock_guard lock(state->mutex);
        state->done = true;
      }
      state->done_cv.notify_all();
    });
  }
  /// The owning variant: `state` moves to the thread, which runs `body(stop_token, State&)`.
  /// The state lives as long as the thread, also when stop_until() leaves it behind, and
  /// is destroyed on the thread when the body returns.
  template <class State, class Body>
  static ServiceThread owning(std::unique_ptr<State> state, Body body) {
    return ServiceThread([state = std::move(state), body = std::move(body)](const std::stop_token& stop) mutable {
      body(stop, *state);
    });
  }
  ServiceThread(ServiceThread&&) noexcept = default;
  ServiceThread& operator=(ServiceThread&&) noexcept = default;
  ~ServiceThread() = default;  // a thread still attached is stopped and joined

  void request_stop() noexcept { thread_.request_stop(); }

  /// Asks the thread to stop and waits for it until `deadline`. True: it has ended (and is
  /// joined). False: it is still running and now detached; whatever it uses must stay
  /// alive until the process exits.
  bool stop_until(std::chrono::steady_clock::time_point deadline) {
    if (!thread_.joinable()) return true;
    thread_.request_stop();
    bool done = false;
    {
      std::unique_lock lock(state_->mutex);
      done = state_->done_cv.wait_until(lock, deadline, [&] { return state_->done; });
    }
    if (done) {
      thread_.join();
    } else {
      thread_.detach();
    }
    return done;
  }

 private:
  // Shared with the thread, so that a detached thread still has it to report to.
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
  };
  std::shared_ptr<State> state_;
  std::jthread thread_;
};

}  // namespace oncely::detail
