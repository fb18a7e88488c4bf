#pragma once
// AttributionGate: lets a group of suspects run with nothing else in flight in the process,
// so that if the process dies, the death is that group's (and a group of one: that job's).
//
// When a worker process dies, every thread's attempt record is left behind, and a record
// does not say which of the process's jobs killed it. So only a record written while its
// batch ran exclusively counts as a job's own crash; a job seen in more than one crash
// runs exclusively, in a group that halves while it crashes (suspects.hpp), and every
// other batch shares the gate. An exclusive holder waits for the shared ones to finish
// their batches (a batch starts no handler after its one-second budget, but a running
// handler may take up to its job_timeout) and stops new ones from starting meanwhile. A
// job's first crash does not isolate it (an outside kill is the common case), so this
// pause is the price of a job that was in flight at two crashes, not of every kill.

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
