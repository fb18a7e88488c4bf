#include "execution/queue_pool.hpp"

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "execution/poll_timing.hpp"
#include "execution/retry_policy.hpp"
#include "support/db.hpp"
#include "support/pooler.hpp"
#include "support/service_thread.hpp"

namespace oncely::detail {
namespace {
/// How long an abandoned pool waits for its handlers to heed their stop tokens.
constexpr auto kHeedStopWithin = std::chrono::seconds(1);
}  // namespace

QueuePool::QueuePool(QueueContext context) : context_(std::move(context)) {
  context_.in_flight = &in_flight_;
  context_.abandon = abandon_.get_token();
  if (context_.config.rate_limit_per_sec > 0) {
    limiter_ = std::make_unique<RateLimiter>(context_.config.rate_limit_per_sec);
  }
}

int QueuePool::take_allowance(const std::stop_token& stop, int wanted) {
  if (!limiter_) return wanted;
  while (!stop.stop_requested()) {
    if (const int taken = limiter_->try_take(wanted); taken > 0) return taken;
    // Not on wake_: a wake-up meant for an idle worker must not land here.
    pause_for(stop, limiter_->time_until_available());
  }
  return 0;
}

QueuePool::~QueuePool() {
  request_stop();
  // jthreads join on destruction; detach_running() has already released any stuck ones.
}

void QueuePool::start() {
  for (int i = 0; i < context_.config.concurrency; ++i) {
    running_.fetch_add(1);
    threads_.emplace_back([this, i](std::stop_token stop) { worker_main(stop, i); });
  }
}

void QueuePool::wake_one() {
  {
    std::lock_guard lock(mutex_);
    wakeups_ = std::min(wakeups_ + 1, context_.config.concurrency);
  }
  wake_.notify_one();
}

void QueuePool::wake_all() {
  {
    std::lock_guard lock(mutex_);
    wakeups_ = context_.config.concurrency;
  }
  wake_.notify_all();
}

void QueuePool::look_back() {
  context_.claim_start->owe_head();
  wake_one();
}

void QueuePool::request_stop() {
  for (auto& t : threads_) t.request_stop();
}

bool QueuePool::wait_stopped(std::chrono::steady_clock::time_point until) {
  std::unique_lock lock(mutex_);
  return exited_.wait_until(lock, until, [&] { return running_.load() == 0; });
}

bool QueuePool::abandon(std::chrono::steady_clock::time_point until) {
  abandon_.request_stop();
  // The handlers are asked to stop; their batches roll back and give their jobs back
  // uncharged (Executor::run_batch). A handler that heeds its stop token is done within
  // this wait, before the process exits; a thread stuck in a call to a partitioned server
  // is not waited for longer.
  if (wait_stopped(std::min(until, std::chrono::steady_clock::now() + kHeedStopWithin))) return true;
  for (auto& t : threads_) {
    if (t.joinable()) t.detach();
  }
  return false;
}

bool QueuePool::wait_for_work(const std::stop_token& stop, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const bool woken = wake_.wait_for(lock, stop, timeout, [&] { return wakeups_ > 0; });
  if (woken) --wakeups_;
  return woken;
}

void QueuePool::connect(WorkerConnections& c) const {
  if (!c.job || !c.job->is_open()) {
    c.job = detail::connect(context_.url);
    context_.store->prepare(*c.job);
    // Through a pooler the connection's backend pid is made up: the attempt record must
    // name the server's, asked in each batch's transaction.
    c.job_pooled = behind_pooler(*c.job);
  }
  c.record.open();
}

void QueuePool::worker_main(const std::stop_token& stop, int index) {
  {
    auto records = context_.records
                       ? context_.records
                       : std::make_shared<RecordConnection>(*context_.store, context_.url, context_.log, false);
    WorkerConnections conns{nullptr, AttemptRecord(*context_.store, std::move(records), context_.worker_id)};
    work(stop, index, conns);
  }
  {
    std::lock_guard lock(mutex_);
    running_.fetch_sub(1);
  }
  exited_.notify_all();
}

void QueuePool::work(const std::stop_token& stop, int index, WorkerConnections& conns) {
  const auto& log = context_.log;
  Executor executor(context_, std::random_device{}() ^ (static_cast<std::uint64_t>(index) << 32));
  std::mt19937_64 jitter_rng(std::random_device{}());
  auto reconnect_delay = kReconnectFirst;
  bool recovering = false;

  while (!stop.stop_requested()) {
    try {
      connect(conns);
      if (recovering) {
        executor.recover(conns);
        recovering = false;
        connect(conns);  // recover() may have retired the attempt record
      }
      reconnect_delay = kReconnectFirst;
      if (!may_claim(context_)) {
        // Paused: the watcher's resume wakes every worker; the poll interval is the fallback.
        wait_for_work(stop, context_.config.poll_interval);
        continue;
      }
      const int allowance = take_allowance(stop, executor.claim_limit());
      if (allowance == 0) break;  // stopped while waiting for the rate limit
      const Executor::BatchResult batch = executor.run_batch(conns, stop, allowance);
      if (limiter_ && batch.claimed < allowance) limiter_->give_back(allowance - batch.claimed);
      // Jobs the batch had no time to start are ready again, and no NOTIFY says so: the
      // idle peers would find them only at their next poll.
      if (batch.released > 0) wake_all();
      // Suspects given back by the batch run next, at once (no NOTIFY announces them).
      // Held back by the queue's limits, after waiting on a slot: wait on one again.
      if (batch.held_back) continue;
      if (batch.claimed >= batch.limit || executor.has_suspects()) {
        wake_one();  // more is probably waiting: let a peer start on it while we go again
        continue;
      }
      // A batch that came back short took every ready job it could lock: what is enqueued
      // after its claim is announced by a NOTIFY, which is counted (wakeups_) even while
      // every thread is busy, so waiting misses nothing and claiming again at once would
      // mostly find nothing (at 800 jobs/s offered to 32 threads, 2.2 claims per job).
      // Idle: sleep until woken, or the poll interval (±10 % so workers drift apart), or
      // until the pace allows a claim from the head that is owed, if this thread makes it.
      auto idle = jittered_poll(context_.config.poll_interval, jitter_rng);
      const auto now = std::chrono::steady_clock::now();
      if (const auto due = context_.claim_start->owed_head_due(now)) {
        idle = std::min(idle, std::chrono::ceil<std::chrono::milliseconds>(*due - now));
      }
      wait_for_work(stop, idle);
    } catch (const std::exception& e) {
      recovering = true;
      // A read-only server (25006: a standby, or the old primary after a failover) is as
      // good as lost: retrying on it would fail for ever; a new connection finds the primary.
      const bool lost = !conns.job || !conns.job->is_open() || !conns.record.is_open() || is_connection_loss(e);
      log->error("worker error queue={} worker={} error={}{}", context_.name, index, one_line(context_.url, e.what()),
                 lost ? "; reconnecting" : "");
      if (lost) {
        conns.job.reset();
        conns.record.drop_connection();
      }
      try {
        if (!lost) {
          executor.recover(conns);
          recovering = false;
        }
      } catch (const std::exception& again) {
        log->error("worker recovery failed queue={} worker={} error={}", context_.name, index,
                   one_line(context_.url, again.what()));
        conns.job.reset();
        conns.record.drop_connection();
      }
      pause_for(stop, reconnect_delay);
      reconnect_delay = next_reconnect_delay(reconnect_delay);
    }
  }
}

}  // namespace oncely::detail
