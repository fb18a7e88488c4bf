#pragma once
// Metrics: the Prometheus families of one worker process, and the HTTP endpoint that
// serves them (--metrics-addr; off by default).
//   counters   oncely_jobs_{completed,retried,dead_lettered,deduplicated,crashed}_total
//              and oncely_jobs_failed_total (retried + dead-lettered), and
//              oncely_job_attempts_total (completed + failed: the denominator of a failure
//              rate), by queue and kind; each configured queue x handler kind at 0 from
//              the start (declare()), so a rate or ratio exists before the first outcome
//              oncely_lease_stale_total (lease attempts whose outcome came too late)
//   histograms oncely_job_run_seconds, oncely_job_wait_seconds (created_at -> start),
//              oncely_claim_seconds{queue} (each claim statement: long ones mean dead
//              index entries at the queue's head, e.g. while the xmin horizon is held)
//   gauges     oncely_jobs_in_flight{queue}; and, from the one process that holds the
//              "metrics" lease (store/leaders.hpp), oncely_queue_depth,
//              oncely_queue_oldest_ready_seconds and oncely_dead_letters by queue, and
//              oncely_jobs_held_by_limit for a queue with limits, read from the database
// GET /metrics, /healthz (the process is alive) and /readyz (its last database contact,
// the heartbeat, succeeded within the last 15 s); served by metrics_server.cpp, which no
// client can starve nor use to take the job path's file descriptors.
//   counter    oncely_metrics_connections_dropped_total{reason}: connections to this
//              endpoint closed unanswered (deadline, evicted, fd_reserve, no_descriptor,
//              header_too_large)
//   counters   oncely_otel_spans_total{result=exported|queue_full|export_failed} and
//              oncely_otel_failed_exports_total, with span export on (support/tracer.hpp)

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "oncely/stats.hpp"
#include "oncely/values.hpp"
#include "support/tracer.hpp"  // ExportCounts

namespace prometheus {
class Registry;
}

namespace oncely::detail {

class BoundedHttpServer;

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// Exports every counter of each queue x kind at 0, and each queue's in-flight gauge:
  /// before any outcome, a queue failing every job has a failure ratio (failed over
  /// attempts, not over a completed series that would never appear), and /metrics is
  /// never empty.
  void declare(const std::vector<std::string>& queues, const std::vector<std::string>& kinds);
  /// Counts one job outcome (thread-safe; called on worker threads).
  void observe(const JobEvent& event);
  /// One claim statement of `queue` took `took` (thread-safe).
  void observe_claim(const std::string& queue, std::chrono::steady_clock::duration took);
  void set_in_flight(const std::string& queue, int jobs);
  /// The database's view of the queues (called by the elected process only).
  void set_queue_stats(const Stats& stats);
  /// Removes those gauges: this process lost the election (another exports them now).
  void clear_queue_stats();
  /// A connection to the metrics endpoint closed unanswered, and why (its thread only).
  void count_dropped_connection(const std::string& reason);
  /// The Prometheus text exposition of every family.
  [[nodiscard]] std::string render() const;

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  void sync_export_counts(const ExportCounts& now) const;

  mutable std::mutex exported_mutex_;
  std::set<std::string> exported_queues_;  // queues with database gauges now
  mutable ExportCounts export_seen_;       // the span export's counts the families hold
};

/// Serves /metrics, /healthz and /readyz on its own thread until destroyed, through a
/// BoundedHttpServer (support/bounded_http_server.hpp): one request per connection, 2 s
/// from accept to the end of the request, 5 s to send the response, at most
/// max_connections() held (the oldest dropped for a new one), none accepted while the
/// process has fewer than its reserve of descriptors left.
class MetricsServer {
 public:
  /// `address` is "host:port" ("[v6]:port" too). Reads RLIMIT_NOFILE once, here. Throws
  /// ConfigError for a malformed address and Error when it cannot listen there.
  MetricsServer(const std::string& address, Metrics& metrics, const std::atomic<std::int64_t>& last_db_contact_ms);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  [[nodiscard]] int port() const noexcept;
  /// The open-file limit the budget was computed for, and the connections it allows.
  [[nodiscard]] std::int64_t open_file_limit() const noexcept;
  [[nodiscard]] std::size_t max_connections() const noexcept;

 private:
  std::unique_ptr<BoundedHttpServer> server_;
  std::thread thread_;
};

}  // namespace oncely::detail
