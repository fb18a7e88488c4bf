#pragma once
// LeaseKeeper: the process's leases, kept alive and watched. One per process, whatever the
// number of lease queues:
//   renewal   every tick (the shortest lease / 3), ONE statement renews every lease the
//             process holds (skipping rows another transaction has locked, still its own)
//             and returns those still its own; a lease it does not return
//             was lost (expired and taken by another worker, or cancelled): its handler
//             is stopped at once.
//   watchdog  a lease that could not be renewed for its whole duration (the database is
//             unreachable) may be another worker's by now: its handler is stopped too, on
//             the worker's own clock, since the database cannot be asked. An attempt past
//             its job_timeout is asked to stop as well.
// Both run on threads of their own, so a renewal stuck behind a partition cannot keep the
// watchdog from stopping handlers.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>

#include "execution/lease_attempt.hpp"
#include "oncely/config.hpp"
#include "oncely/database_url.hpp"
#include "support/service_thread.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

class Store;

class LeaseKeeper {
 public:
  LeaseKeeper(const Store& store, DatabaseUrl url, std::shared_ptr<spdlog::logger> log, const Config& config);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void start();
  /// Stops both threads, waiting until `deadline`; false if one was left behind.
  bool stop_until(std::chrono::steady_clock::time_point deadline);

  /// From its claim's commit until it is settled or released, `attempt` is renewed.
  void hold(const std::shared_ptr<LeaseAttempt>& attempt);
  void drop(std::int64_t token);
  [[nodiscard]] std::chrono::milliseconds tick() const noexcept { return tick_; }

  /// The renewal interval for these queues: a third of the shortest lease.
  static std::chrono::milliseconds tick_for(const Config& config);

 private:
  void renew_loop(const std::stop_token& stop);
  void watch_loop(const std::stop_token& stop);
  void lose(LeaseAttempt& attempt, const std::string& why);

  const Store& store_;
  DatabaseUrl url_;
  std::shared_ptr<spdlog::logger> log_;
  std::chrono::milliseconds tick_;
  std::mutex mutex_;
  // By lease token, not job id: this process may lease a job again while an attempt whose
  // lease expired still runs, and each attempt is watched until it settles.
  std::map<std::int64_t, std::shared_ptr<LeaseAttempt>> held_;
  ServiceThread renewer_;
  ServiceThread watchdog_;
};

}  // namespace oncely::detail
