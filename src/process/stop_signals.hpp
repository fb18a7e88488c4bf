#pragma once
// The stop signals (SIGTERM, SIGINT): the one place that decides how they reach a worker.
// They are blocked in every thread (a thread inherits the mask of the thread that starts
// it, so they must be blocked before the first thread exists) and taken by one thread with
// sigtimedwait; no work happens in a signal handler.

#include <signal.h>

#include <chrono>
#include <functional>
#include <thread>

namespace oncely::detail {

/// SIGTERM and SIGINT.
sigset_t stop_signal_set() noexcept;

/// Blocks the stop signals in the calling thread; returns the mask it had before.
sigset_t block_stop_signals_here() noexcept;

/// Waits up to `tick` for a stop signal (blocked in every thread, pending for the
/// process); returns its number, or 0 when none came.
int take_stop_signal(std::chrono::milliseconds tick) noexcept;

/// Owns the thread that takes the stop signals: blocks them in the constructing thread
/// (so that threads started after it inherit the mask), calls `on_signal(sig)` on its own
/// thread for each one taken; the destructor stops that thread and restores the
/// constructing thread's mask. Construct and destroy it on the same thread.
class StopSignalWatcher {
 public:
  explicit StopSignalWatcher(std::function<void(int)> on_signal);
  ~StopSignalWatcher();
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;

 private:
  sigset_t previous_;
  std::jthread thread_;
};

}  // namespace oncely::detail
