#pragma once
// QueueRunner: what the process asks of one queue, whatever its mode: a transaction
// queue's QueuePool (worker threads, each in its batch's transaction) or a lease queue's
// LeaseQueue (a control thread claiming and settling, handler threads holding no
// connection).

#include <chrono>
#include <string>

namespace oncely::detail {

class QueueRunner {
 public:
  virtual ~QueueRunner() = default;
  virtual void start() = 0;
  /// Jobs were inserted: let one idle claimer look. Cheap; callable from any thread.
  virtual void wake_one() = 0;
  /// Wake every claimer (the listener reconnected and may have missed notifications).
  virtual void wake_all() = 0;
  /// Jobs may have committed before the claims' start with no NOTIFY of their own (the
  /// listener's second wake-up): owe a claim from the head and let one claimer look.
  virtual void look_back() = 0;
  /// Claim nothing more; let what runs finish and settle.
  virtual void request_stop() = 0;
  /// Waits until everything has finished or `until` passes; returns whether it has.
  virtual bool wait_stopped(std::chrono::steady_clock::time_point until) = 0;
  /// After wait_stopped() gave up at the end of the shutdown grace: stops what still runs
  /// (transaction queues leave their batches to roll back; lease queues release their
  /// leases), and waits for that until `until`. Returns whether nothing is left running.
  virtual bool abandon(std::chrono::steady_clock::time_point until) = 0;
  [[nodiscard]] virtual int jobs_in_flight() const noexcept = 0;
  [[nodiscard]] virtual const std::string& name() const noexcept = 0;
};

}  // namespace oncely::detail
