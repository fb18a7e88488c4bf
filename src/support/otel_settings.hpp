#pragma once
// OpenTelemetry's standard environment variables, read into the settings of oncely's span
// export (docs/opentelemetry.md). Pure: the environment is passed in, so the rules are
// tested as a table (tests/unit/otel_settings_test.cpp).
//
// Spans are exported when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
// is set, unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none; metrics only when
// asked (OTEL_METRICS_EXPORTER=otlp), since the worker serves them to Prometheus already. A value that cannot be meant
// (a ratio of 2, a queue size of "many", the gRPC protocol) is a ConfigError naming the
// variable: a worker that was asked to export and silently does not is the worse failure.

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace oncely::detail {

enum class Sampler {
  always_on,
  always_off,
  trace_id_ratio,
  parent_based_always_on,
  parent_based_always_off,
  parent_based_trace_id_ratio
};

/// Where one signal (spans, or metrics) goes, and how.
struct OtlpTarget {
  std::string url;                                           // where it is POSTed (…/v1/traces, …/v1/metrics)
  std::vector<std::pair<std::string, std::string>> headers;  // may hold API keys: never logged
  std::chrono::milliseconds timeout{10000};                  // one POST
};

struct OtelSettings {
  bool traces_enabled = false;
  bool metrics_enabled = false;  // OTEL_METRICS_EXPORTER=otlp: the messaging metrics, over OTLP too
  OtlpTarget traces;
  OtlpTarget metrics;
  std::vector<std::pair<std::string, std::string>> resource;  // service.name first
  Sampler sampler = Sampler::parent_based_always_on;
  double ratio = 1.0;                                // for the trace-id-ratio samplers
  std::chrono::milliseconds schedule_delay{5000};    // between exports of a part-filled batch of spans
  std::size_t max_queue_size = 2048;                 // spans waiting; more are dropped, counted
  std::size_t max_batch_size = 512;                  // spans per POST
  std::chrono::milliseconds metric_interval{60000};  // between exports of the metrics
  std::vector<std::string> warnings;                 // settings understood otherwise than asked
};

/// Reads the OTEL_* variables through `getenv` (null: unset). `program` names the service
/// when neither OTEL_SERVICE_NAME nor service.name in OTEL_RESOURCE_ATTRIBUTES does
/// ("unknown_service:<program>", as the specification says). Throws ConfigError.
[[nodiscard]] OtelSettings read_otel_settings(const std::function<const char*(const char*)>& getenv,
                                              const std::string& program);

/// The URL for logs and messages: without user info, query and fragment.
[[nodiscard]] std::string display_url(const std::string& url);

}  // namespace oncely::detail
