#pragma once
// OpenTelemetry's messaging metrics (docs/opentelemetry.md#metrics), exported over OTLP/HTTP
// (JSON) when OTEL_METRICS_EXPORTER=otlp asks for them; the same outcomes are always on the
// Prometheus endpoint (--metrics-addr).
//   messaging.client.sent.messages       counter    messages enqueued (send)
//   messaging.client.operation.duration  histogram  how long an enqueue took (send), s
//   messaging.client.consumed.messages   counter    attempts that ran (process)
//   messaging.process.duration           histogram  how long a handler ran (process), s
// each by messaging.system, messaging.destination.name (the queue), messaging.operation.name
// and error.type (a failed attempt's class). Cumulative since the process started, as
// Prometheus counts.

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "support/otel_settings.hpp"
#include "support/otlp_sender.hpp"
#include "support/service_thread.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

/// The aggregation and its encoding (pure but for its mutex): thread-safe.
class MessagingMetrics {
 public:
  explicit MessagingMetrics(std::int64_t start_unix_ns) : start_unix_ns_(start_unix_ns) {}

  /// One attempt of a job of `queue` ran for `seconds`; `error_type` empty when it succeeded.
  void processed(std::string_view queue, std::string_view error_type, double seconds);
  /// `messages` jobs of `queue` were enqueued in one call that took `seconds`; `error_type`
  /// empty when it succeeded.
  void sent(std::string_view queue, std::string_view error_type, double seconds, std::int64_t messages);
  /// An ExportMetricsServiceRequest of everything so far, at `now_unix_ns`.
  [[nodiscard]] std::string otlp_json(const std::vector<std::pair<std::string, std::string>>& resource,
                                      const std::string& version, std::int64_t now_unix_ns) const;

  /// The messaging conventions' advised buckets for durations, in seconds.
  static constexpr std::array<double, 14> kBounds = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                                     0.5,   0.75, 1,     2.5,  5,     7.5, 10};

 private:
  struct Series {
    std::int64_t messages = 0;
    std::int64_t count = 0;  // operations timed
    double sum = 0;
    std::vector<std::uint64_t> buckets;  // kBounds.size() + 1
  };
  using Key = std::tuple<std::string, std::string, std::string>;  // operation, queue, error type
  void add(const Key& key, double seconds, std::int64_t messages);

  const std::int64_t start_unix_ns_;
  mutable std::mutex mutex_;
  std::map<Key, Series> series_;
};

/// Exports the process's MessagingMetrics every OTEL_METRIC_EXPORT_INTERVAL on a thread of
/// its own; a failed export is logged (at most once a minute) and tried again at the next.
class Meter {
 public:
  Meter(OtelSettings settings, std::shared_ptr<spdlog::logger> log);
  ~Meter();
  Meter(const Meter&) = delete;
  Meter& operator=(const Meter&) = delete;

  [[nodiscard]] MessagingMetrics& metrics() noexcept { return metrics_; }
  /// Exports now; true when it was sent before `deadline`.
  bool flush(std::chrono::steady_clock::time_point deadline);
  void set_log(std::shared_ptr<spdlog::logger> log);

 private:
  void export_loop(const std::stop_token& stop);
  void export_now(const std::stop_token& stop);

  const OtelSettings settings_;
  MessagingMetrics metrics_;
  OtlpSender sender_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::condition_variable idle_;
  std::uint64_t flush_wanted_ = 0, flush_done_ = 0;
  std::shared_ptr<spdlog::logger> log_;
  std::chrono::steady_clock::time_point last_failure_log_{};
  bool failing_ = false;
  ServiceThread thread_;
};

}  // namespace oncely::detail
