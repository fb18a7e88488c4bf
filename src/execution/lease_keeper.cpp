#include "execution/lease_keeper.hpp"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "store/store.hpp"
#include "support/db.hpp"
#include "support/duration.hpp"
#include "support/steady_clock.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {
namespace {

// How often the watchdog looks: a lease that ran out is acted on within this.
constexpr auto kWatchInterval = std::chrono::milliseconds(100);
// After a failed renewal, the next try comes sooner than a tick, but not in a busy loop.
constexpr auto kRetryAfterFailure = std::chrono::milliseconds(250);

}  // namespace

std::chrono::milliseconds LeaseKeeper::tick_for(const Config& config) {
  auto shortest = std::chrono::milliseconds::max();
  for (const auto& [name, queue] : config.queues) {
    if (queue.mode == QueueConfig::Mode::lease) shortest = std::min(shortest, queue.lease);
  }
  return shortest == std::chrono::milliseconds::max() ? std::chrono::seconds(10) : shortest / 3;
}

LeaseKeeper::LeaseKeeper(const Store& store, DatabaseUrl url, std::shared_ptr<spdlog::logger> log, const Config& config)
    : store_(store), url_(std::move(url)), log_(std::move(log)), tick_(tick_for(config)) {}

LeaseKeeper::~LeaseKeeper() { stop_until(std::chrono::steady_clock::now()); }

void LeaseKeeper::start() {
  renewer_ = ServiceThread([this](const std::stop_token& stop) { renew_loop(stop); });
  watchdog_ = ServiceThread([this](const std::stop_token& stop) { watch_loop(stop); });
}

bool LeaseKeeper::stop_until(std::chrono::steady_clock::time_point deadline) {
  renewer_.request_stop();
  watchdog_.request_stop();
  const bool renewer = renewer_.stop_until(deadline);
  return watchdog_.stop_until(deadline) && renewer;
}

void LeaseKeeper::hold(const std::shared_ptr<LeaseAttempt>& attempt) {
  std::lock_guard lock(mutex_);
  held_[attempt->held.token] = attempt;
}

void LeaseKeeper::drop(std::int64_t token) {
  std::lock_guard lock(mutex_);
  held_.erase(token);
}

void LeaseKeeper::lose(LeaseAttempt& a, const std::string& why) {
  if (a.lost.exchange(true)) return;
  a.lost_at_unix_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  a.stop.request_stop();
  log_->warn("lease lost queue={} kind={} id={} attempt={}{} token={}: {}; stopping its handler", a.queue, a.job.kind,
             a.held.job_id, a.job.attempts, trace_field(a.job.trace_context), a.held.token, why);
}

void LeaseKeeper::renew_loop(const std::stop_token& stop) {
  std::unique_ptr<pqxx::connection> conn;
  auto wait = tick_;
  while (pause_for(stop, wait)) {
    std::vector<std::shared_ptr<LeaseAttempt>> snapshot;
    {
      std::lock_guard lock(mutex_);
      snapshot.reserve(held_.size());
      for (const auto& [token, attempt] : held_) snapshot.push_back(attempt);
    }
    wait = tick_;
    if (snapshot.empty()) continue;
    std::vector<HeldLease> held;
    std::vector<std::chrono::milliseconds> durations;
    held.reserve(snapshot.size());
    durations.reserve(snapshot.size());
    for (const auto& a : snapshot) {
      held.push_back(a->held);
      durations.push_back(a->lease);
    }
    try {
      if (!conn || !conn->is_open()) {
        conn = connect(url_);
        store_.prepare(*conn);
        // A renewal that cannot finish within a tick is late anyway; the next one retries.
        pqxx::nontransaction(*conn).exec("SET statement_timeout = " +
                                         std::to_string(std::max<long>(1000, tick_.count())));
      }
      const std::int64_t sent = steady_ms();
      pqxx::work tx(*conn);
      const RenewedLeases kept = store_.leases.renew(tx, held, durations);
      const std::unordered_set<std::int64_t> renewed(kept.renewed.begin(), kept.renewed.end());
      std::unordered_set<std::int64_t> still(renewed);
      still.insert(kept.skipped.begin(), kept.skipped.end());
      // A job its own handler completed (complete_job() with our token) is gone but not lost:
      // the handler finishes, and the settlement counts the completion.
      std::vector<std::int64_t> gone;
      for (const auto& a : snapshot) {
        if (!still.contains(a->held.token)) gone.push_back(a->held.token);
      }
      const std::unordered_set<std::int64_t> self_completed = store_.lease_completions.completed(tx, gone);
      tx.commit();
      for (const auto& a : snapshot) {
        if (self_completed.contains(a->held.token)) continue;
        if (renewed.contains(a->held.token)) {
          const std::int64_t until = sent + a->lease.count();
          std::int64_t before = a->valid_until_ms.load();
          while (before < until && !a->valid_until_ms.compare_exchange_weak(before, until)) {
          }
        } else if (still.contains(a->held.token)) {
          // Its row was locked by another transaction: still ours, its lease as it was.
        } else if (!a->finished.load()) {
          // A job settled (deleted) while this renewal ran is not lost: finished says so.
          lose(*a,
               "the renewal found its lease gone (it expired and another worker took the job, or the job was "
               "cancelled)");
        }
      }
    } catch (const std::exception& e) {
      log_->warn("lease renewal failed ({} lease(s)): {}; retrying", snapshot.size(), one_line(url_, e.what()));
      conn.reset();
      wait = std::min(tick_, kRetryAfterFailure);
    }
  }
}

void LeaseKeeper::watch_loop(const std::stop_token& stop) {
  while (pause_for(stop, kWatchInterval)) {
    std::vector<std::shared_ptr<LeaseAttempt>> snapshot;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [token, attempt] : held_) snapshot.push_back(attempt);
    }
    const std::int64_t now_ms = steady_ms();
    const auto now = std::chrono::steady_clock::now();
    for (const auto& a : snapshot) {
      if (a->finished.load()) continue;
      if (now_ms > a->valid_until_ms.load()) {
        lose(*a, "no renewal of it reached the database for " + format_duration(a->lease) +
                     " (the database unreachable, or this process stalled), so another worker may hold it now");
      } else if (now > a->deadline && !a->stop.stop_requested()) {
        a->stop.request_stop();
        log_->warn("job past its job_timeout, asking its handler to stop queue={} kind={} id={} attempt={}{}", a->queue,
                   a->job.kind, a->held.job_id, a->job.attempts, trace_field(a->job.trace_context));
      }
    }
  }
}

}  // namespace oncely::detail
