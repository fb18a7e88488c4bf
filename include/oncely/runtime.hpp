#pragma once
// Runtime: runs worker pools for every configured queue until stopped.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "oncely/config.hpp"
#include "oncely/job_context.hpp"

namespace spdlog {
class logger;
}

namespace oncely {

/// A handler for one job kind. Throw oncely::PermanentError to dead-letter the job at
/// once, oncely::RetryAfter to retry after a given delay; any other exception retries with
/// the queue's backoff. Returning normally completes the job.
using Handler = std::function<void(JobContext&)>;

/// What a handler declares about its effects when it is registered.
struct HandlerOptions {
  /// The handler's only effects are its writes through JobContext::tx(): no HTTP calls, no
  /// messages, no files. Such a handler needs no savepoint of its own (one round trip less
  /// per job, often twice the throughput): when it fails after writing, the whole batch is
  /// rolled back instead, its failure is recorded in a fresh transaction, and the other
  /// jobs of the batch run again at once (their writes were rolled back with it, so they
  /// still apply exactly once). Jobs of other handlers in the same batch are never re-run
  /// that way: after one of them has run, the batch isolates every job with a savepoint.
  /// Built-in `sql` handlers are transaction-only. Default false: each job that touches
  /// tx() gets a savepoint, and a failure rolls back only that job's writes.
  bool transaction_only = false;
  /// Optional: called once by Runtime::run() before any job is claimed, on a connection of
  /// the process with no transaction open, so that a handler that can never work (a
  /// statement naming a table that does not exist) stops the worker instead of
  /// dead-lettering every job. Throw to refuse to start: run() passes a ConfigError on as
  /// it is and turns any other exception into a ConfigError naming the kind (a lost
  /// connection into a DatabaseError). It must leave the connection as it found it (no
  /// named prepared statements, no session settings, no transaction).
  /// Built-in `sql` handlers describe their statement here.
  std::function<void(pqxx::connection_base&)> startup_check{};
};

/// What happened to one job, reported after the transaction that decided it committed.
struct JobEvent {
  /// crashed: an earlier attempt of this job was found unfinished (its worker died); it is
  /// reported once, before the outcome of the attempt that found it.
  enum class Outcome { completed, deduplicated, retried, dead_lettered, crashed };
  std::int64_t id = 0;
  std::string queue;
  std::string kind;
  int attempt = 0;              ///< the attempt that produced this outcome (0 for a duplicate)
  Outcome outcome = Outcome::completed;
  std::string error_class;      ///< for retried / dead_lettered: "retryable", "permanent", ...
  std::chrono::microseconds run_time{0};  ///< handler time
  std::chrono::microseconds wait{0};      ///< from created_at to the claim of this attempt
};

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

  /// Blocks until stopped; returns the process exit code (0 after a clean drain).
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
