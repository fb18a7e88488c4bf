#pragma once
// Runtime: runs worker pools for every configured queue until stopped.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "oncely/config.hpp"
#include "oncely/job_context.hpp"
#include "oncely/values.hpp"

namespace spdlog {
class logger;
}

namespace oncely {

struct RuntimeOptions {
  /// Where the runtime logs; null: a stderr logger named "oncely".
  std::shared_ptr<spdlog::logger> logger;
  /// Called on worker threads after each job's outcome is committed. Must be thread-safe and
  /// quick (metrics, tests); exceptions it throws are logged and ignored.
  std::function<void(const JobEvent&)> on_event;
  /// run() stops on SIGTERM/SIGINT: it blocks them in its thread before starting any
  /// thread of its own and takes them on one thread with sigtimedwait. A thread started
  /// earlier (yours, a library's) must have them blocked too, or the kernel may deliver a
  /// SIGTERM to it and end the process: call block_stop_signals() first thing in main().
  /// Turn off when embedding in a program that owns signals and calls request_stop() itself.
  bool handle_signals = true;
  /// "host:port" to serve Prometheus /metrics, /healthz and /readyz on; empty: off.
  /// Port 0 picks a free port (see Runtime::metrics_port()).
  std::string metrics_address{};
};

/// Blocks SIGTERM and SIGINT in the calling thread, so that every thread it starts from now
/// on inherits the mask and only Runtime::run() (with handle_signals) takes them. Call it
/// first in main(), before anything starts a thread, when run() is to handle the signals.
void block_stop_signals() noexcept;

/// Runs workers for every queue in the Config until stopped, then drains: no new claims,
/// running jobs get up to shutdown_grace to finish, the rest roll back (and are redelivered).
/// Thread-safety: handle() only before run(); request_stop() from any thread.
/// Ownership: each worker thread owns its connections; handlers run on worker threads.
class Runtime {
 public:
  explicit Runtime(Config config, RuntimeOptions options = {});
  ~Runtime();  // stops and joins if still running
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  /// Movable before run() (a moved-from Runtime may only be destroyed or assigned to).
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;

  /// Registers the handler for `kind` (replacing any earlier one).
  void handle(std::string kind, Handler handler, HandlerOptions options = {});

  /// Blocks until stopped, then drains; returns 0, the process exit code, also when the
  /// drain ran out of time (the jobs still running were rolled back or released; the log
  /// says so).
  /// Throws DatabaseError if the database is unreachable or not migrated at start-up.
  int run();

  /// Asks run() to drain and return. Safe from any thread and from a signal-free context.
  void request_stop() noexcept;

  /// The port /metrics listens on once run() has started serving it; 0 before or when off.
  [[nodiscard]] int metrics_port() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace oncely
