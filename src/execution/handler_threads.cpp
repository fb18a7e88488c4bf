#include "execution/handler_threads.hpp"

#include <algorithm>

namespace oncely::detail {

void HandlerThreads::dispatch(const std::vector<std::shared_ptr<LeaseAttempt>>& attempts) {
  if (attempts.empty()) return;
  std::lock_guard lock(mutex_);
  ready_.insert(ready_.end(), attempts.begin(), attempts.end());
  const int to_start =
      std::min(static_cast<int>(ready_.size()) - idle_, max_threads_ - static_cast<int>(threads_.size()));
  for (int i = 0; i < to_start; ++i) threads_.emplace_back([this] { thread_main(); });
  if (idle_ > 0 && wakes_pending_ == 0) {
    ++wakes_pending_;
    cv_.notify_one();
  }
}

void HandlerThreads::close() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
    ready_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void HandlerThreads::detach() {
  for (auto& t : threads_) {
    if (t.joinable()) t.detach();
  }
}

void HandlerThreads::thread_main() {
  while (true) {
    std::shared_ptr<LeaseAttempt> attempt;
    bool wake_next = false;
    {
      std::unique_lock lock(mutex_);
      ++idle_;
      while (!closing_ && ready_.empty()) {
        cv_.wait(lock);
        if (wakes_pending_ > 0) --wakes_pending_;  // this thread is awake: the wake-up has landed
      }
      --idle_;
      if (ready_.empty()) return;  // closing
      attempt = std::move(ready_.front());
      ready_.pop_front();
      wake_next = !ready_.empty() && idle_ > 0 && wakes_pending_ == 0;
      if (wake_next) ++wakes_pending_;
    }
    // Outside the lock, so that the thread woken does not wait for it.
    if (wake_next) cv_.notify_one();
    run_(std::move(attempt));
  }
}

}  // namespace oncely::detail
