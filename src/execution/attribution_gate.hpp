#pragma once
// AttributionGate: lets a job that may crash its worker run with nothing else in flight in
// the process, so that if the process dies, the death is that job's.
//
// When a worker process dies, every thread's attempt record is left behind. A record naming
// one job was taken as that job's crashed attempt; but with four threads, an innocent job
// running alone on one thread was charged for the poison job that killed the process from
// another, and after three such deaths was dead-lettered as `crashed`. So only a record
// written while its batch ran exclusively counts as a job's own crash: a job found in the
// record of a batch that never finished (a suspect) runs exclusively, and every other batch
// shares the gate. An exclusive holder waits for the shared ones to finish their batches
// (a batch starts no handler after its one-second budget, but a running handler may take up
// to its job_timeout) and stops new ones from starting meanwhile. Suspects exist only after
// a worker died, so this pause is the price of recovering from a crash, not of normal work.

#include <condition_variable>
#include <mutex>

namespace oncely::detail {

class AttributionGate {
 public:
  void lock_shared() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !exclusive_ && exclusive_waiting_ == 0; });
    ++shared_;
  }
  void unlock_shared() {
    {
      std::lock_guard lock(mutex_);
      --shared_;
    }
    changed_.notify_all();
  }
  void lock() {
    std::unique_lock lock(mutex_);
    ++exclusive_waiting_;
    changed_.wait(lock, [&] { return !exclusive_ && shared_ == 0; });
    --exclusive_waiting_;
    exclusive_ = true;
  }
  void unlock() {
    {
      std::lock_guard lock(mutex_);
      exclusive_ = false;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int shared_ = 0;             // batches in flight that share the process
  int exclusive_waiting_ = 0;  // suspects waiting to run alone: no new shared batch starts
  bool exclusive_ = false;     // a suspect runs alone now
};

}  // namespace oncely::detail
