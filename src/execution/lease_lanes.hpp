#pragma once
// The runner of a lease queue. With one connection (the default) that is one LeaseQueue.
// With "connections": N, it is N LeaseQueues on the same queue ("lanes"), each with its own
// control thread, connection and share of the concurrency, sharing the queue's rate limit:
// their claims and completions run in parallel (SKIP LOCKED keeps their claims apart) and
// the process's LeaseKeeper renews the leases of all of them.

#include <memory>
#include <vector>

#include "execution/lease_queue.hpp"

namespace oncely::detail {

std::unique_ptr<QueueRunner> make_lease_runner(QueueContext context, LeaseKeeper& keeper);

class LeaseLanes final : public QueueRunner {
 public:
  LeaseLanes(const QueueContext& context, LeaseKeeper& keeper);

  void start() override;
  void wake_one() override;
  void wake_all() override;
  void look_back() override;
  void request_stop() override;
  bool wait_stopped(std::chrono::steady_clock::time_point until) override;
  bool abandon(std::chrono::steady_clock::time_point until) override;
  [[nodiscard]] int jobs_in_flight() const noexcept override;
  [[nodiscard]] const std::string& name() const noexcept override { return name_; }

 private:
  std::string name_;
  std::vector<std::unique_ptr<LeaseQueue>> lanes_;
  std::atomic<unsigned> next_wake_{0};
};

}  // namespace oncely::detail
