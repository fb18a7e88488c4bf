#pragma once
// Metrics: the Prometheus families of one worker process, and the HTTP endpoint that
// serves them (--metrics-addr; off by default).
//   counters   oncely_jobs_{completed,retried,dead_lettered,deduplicated,crashed}_total
//              and oncely_jobs_failed_total (retried + dead-lettered), by queue and kind
//   histograms oncely_job_run_seconds, oncely_job_wait_seconds (created_at -> start)
//   gauges     oncely_jobs_in_flight{queue}; and, from the process that holds the
//              maintenance election, oncely_queue_depth, oncely_queue_oldest_ready_seconds
//              and oncely_dead_letters by queue, read from the database
// GET /metrics, /healthz (the process is alive) and /readyz (its last database contact,
// the heartbeat, succeeded within the last 15 s).

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "oncely/runtime.hpp"
#include "oncely/stats.hpp"

namespace prometheus {
class Registry;
}

namespace oncely::detail {

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// Counts one job outcome (thread-safe; called on worker threads).
  void observe(const JobEvent& event);
  void set_in_flight(const std::string& queue, int jobs);
  /// The database's view of the queues (called by the elected process only).
  void set_queue_stats(const Stats& stats);
  /// The Prometheus text exposition of every family.
  [[nodiscard]] std::string render() const;

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
};

/// Serves /metrics, /healthz and /readyz on its own thread until destroyed.
class MetricsServer {
 public:
  /// `address` is "host:port". Throws ConfigError for a malformed address and Error when
  /// it cannot listen there.
  MetricsServer(const std::string& address, const Metrics& metrics, const std::atomic<std::int64_t>& last_db_contact_ms);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  [[nodiscard]] int port() const noexcept { return port_; }

 private:
  struct Server;
  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::thread thread_;
};

/// Milliseconds on the steady clock, for last_db_contact_ms.
std::int64_t steady_ms();

}  // namespace oncely::detail
