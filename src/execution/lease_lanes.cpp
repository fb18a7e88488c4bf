#include "execution/lease_lanes.hpp"

#include <future>

namespace oncely::detail {
namespace {

std::shared_ptr<RateLimiter> limiter_for(const QueueConfig& config) {
  if (config.rate_limit_per_sec <= 0) return nullptr;
  return std::make_shared<RateLimiter>(config.rate_limit_per_sec);
}

}  // namespace

std::unique_ptr<QueueRunner> make_lease_runner(QueueContext context, LeaseKeeper& keeper) {
  if (context.config.connections <= 1) {
    auto limiter = limiter_for(context.config);
    return std::make_unique<LeaseQueue>(std::move(context), keeper, std::move(limiter));
  }
  return std::make_unique<LeaseLanes>(context, keeper);
}

LeaseLanes::LeaseLanes(const QueueContext& context, LeaseKeeper& keeper) : name_(context.name) {
  const int lanes = context.config.connections;
  const int concurrency = context.config.concurrency;  // validated: at least `lanes`
  const auto limiter = limiter_for(context.config);
  for (int i = 0; i < lanes; ++i) {
    QueueContext lane = context;
    lane.config.concurrency = concurrency / lanes + (i < concurrency % lanes ? 1 : 0);
    lanes_.push_back(std::make_unique<LeaseQueue>(std::move(lane), keeper, limiter));
  }
}

void LeaseLanes::start() {
  for (auto& lane : lanes_) lane->start();
}

void LeaseLanes::wake_one() {
  // Inserts come one NOTIFY per statement: the lanes take turns looking.
  lanes_[next_wake_.fetch_add(1, std::memory_order_relaxed) % lanes_.size()]->wake_one();
}

void LeaseLanes::look_back() {
  // The lanes share the queue's claim start: one lane owes it and looks.
  lanes_[next_wake_.fetch_add(1, std::memory_order_relaxed) % lanes_.size()]->look_back();
}

void LeaseLanes::wake_all() {
  for (auto& lane : lanes_) lane->wake_all();
}

void LeaseLanes::request_stop() {
  for (auto& lane : lanes_) lane->request_stop();
}

bool LeaseLanes::wait_stopped(std::chrono::steady_clock::time_point until) {
  bool stopped = true;
  for (auto& lane : lanes_) stopped = lane->wait_stopped(until) && stopped;
  return stopped;
}

bool LeaseLanes::abandon(std::chrono::steady_clock::time_point until) {
  // Every lane gives up at once, each until the same moment.
  std::vector<std::future<bool>> abandoned;
  for (auto& lane : lanes_) {
    abandoned.push_back(std::async(std::launch::async, [&lane, until] { return lane->abandon(until); }));
  }
  bool all = true;
  for (auto& a : abandoned) all = a.get() && all;
  return all;
}

int LeaseLanes::jobs_in_flight() const noexcept {
  int n = 0;
  for (const auto& lane : lanes_) n += lane->jobs_in_flight();
  return n;
}

}  // namespace oncely::detail
