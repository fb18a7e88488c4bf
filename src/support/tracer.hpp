#pragma once
// The process's span export (OpenTelemetry, docs/opentelemetry.md): ids, the sampler, and
// a bounded queue that a background thread empties in batches over OTLP/HTTP (JSON).
//
// Never in a job's way: submit() takes a mutex for a push and returns; when the queue is
// full (the collector down or slow) the span is dropped and counted, so a dead collector
// costs memory up to max_queue_size spans, twice over while the export thread holds a
// queue it took, and nothing else. The export thread runs at nice 10. A failed POST drops its batch
// (counted) rather than retrying it: by the time a collector is back, fresh spans matter
// more than a backlog, and a retry loop is how an exporter grows without bound.
//
// One per process (support/telemetry.hpp).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/otel_settings.hpp"
#include "support/otlp_sender.hpp"
#include "support/otlp_spans.hpp"
#include "support/service_thread.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

/// Where a span sits: its trace, its own id, and whether it is exported.
struct SpanContext {
  TraceId trace_id;
  SpanId span_id;
  bool sampled = false;
  /// As a W3C traceparent (version 00).
  [[nodiscard]] std::string traceparent() const;
  /// The context a traceparent carries (none when it is not one).
  [[nodiscard]] static std::optional<SpanContext> of(std::string_view traceparent);
  /// The same for a traceparent this process made (traceparent()): not checked again.
  [[nodiscard]] static SpanContext of_own(std::string_view traceparent);
};

/// What the export has done since the process started (Prometheus: oncely_otel_*).
struct ExportCounts {
  std::uint64_t exported = 0;               // spans a receiver accepted
  std::uint64_t dropped_queue_full = 0;     // spans dropped at submit(): the queue was full
  std::uint64_t dropped_export_failed = 0;  // spans of batches whose POST failed
  std::uint64_t failed_exports = 0;         // POSTs that failed
};

/// Whether the sampler keeps a root span of `trace_id` (pure).
[[nodiscard]] bool sample_root(Sampler sampler, double ratio, std::string_view trace_id);
/// Whether the sampler keeps a span whose parent is `parent` (none: a root).
[[nodiscard]] bool sample(Sampler sampler, double ratio, const std::optional<SpanContext>& parent,
                          std::string_view trace_id);

/// Lowers the calling thread's priority (nice 10): the export threads call it.
void yield_to_jobs();

/// Nanoseconds since the Unix epoch, as OTLP counts time.
[[nodiscard]] std::int64_t unix_ns(std::chrono::system_clock::time_point t);

class Tracer {
 public:
  Tracer(OtelSettings settings, std::shared_ptr<spdlog::logger> log);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  /// The context of a new span: a child of `parent` (a traceparent: its trace, a new span
  /// id), or a new trace's root when there is none (or it is no traceparent); sampled as the
  /// settings' sampler says.
  [[nodiscard]] SpanContext start(const std::optional<std::string>& parent);
  /// A new span id of 16 hex digits, never all zero.
  [[nodiscard]] static SpanId new_span_id();
  /// Queues `span` for export (unsampled spans are never made); drops it, counted, when the
  /// queue is full. Never blocks for longer than a push.
  void submit(SpanRecord span);
  /// Queues `spans` under one lock, as submit() does each.
  void submit(std::vector<SpanRecord>& spans);
  /// Exports what is queued now; true when it was sent (or dropped) before `deadline`.
  bool flush(std::chrono::steady_clock::time_point deadline);
  [[nodiscard]] ExportCounts counts() const;
  [[nodiscard]] const OtelSettings& settings() const noexcept { return settings_; }
  void set_log(std::shared_ptr<spdlog::logger> log);

 private:
  void export_loop(const std::stop_token& stop);
  [[nodiscard]] std::shared_ptr<spdlog::logger> log() const;
  void note_result(std::size_t spans, const std::optional<std::string>& failure);

  const OtelSettings settings_;
  mutable std::mutex mutex_;
  std::condition_variable_any wake_;
  std::condition_variable idle_;
  std::vector<SpanRecord> queue_;   // the export thread takes it whole
  std::uint64_t flush_wanted_ = 0;  // flush() calls asked so far
  std::uint64_t flush_done_ = 0;    // of those, the ones whose spans are sent
  bool exporting_ = false;
  std::shared_ptr<spdlog::logger> log_;
  std::atomic<std::uint64_t> exported_{0}, dropped_queue_full_{0}, dropped_export_failed_{0}, failed_exports_{0};
  std::chrono::steady_clock::time_point last_failure_log_{};
  bool failing_ = false;
  std::unique_ptr<OtlpSender> sender_;
  ServiceThread thread_;
};

}  // namespace oncely::detail
