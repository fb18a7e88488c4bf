#pragma once
// The process's OpenTelemetry export (docs/opentelemetry.md): its Tracer (spans) and its
// Meter (the messaging metrics), made from the OTEL_* variables at the first call and never
// destroyed: the worker's shutdown, `oncely enqueue` and oncely::flush_telemetry() flush them
// explicitly (flush_telemetry()), before static destruction could take the logger away.

#include <chrono>

#include "support/otel_metrics.hpp"
#include "support/tracer.hpp"

namespace oncely::detail {

/// The process's Tracer; null when spans are not exported (no OTLP endpoint set,
/// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none). Throws ConfigError when an OTEL_*
/// variable cannot be meant, at every call.
[[nodiscard]] Tracer* process_tracer();
/// The process's Meter; null unless OTEL_METRICS_EXPORTER=otlp. Throws as process_tracer().
[[nodiscard]] Meter* process_meter();
/// Sends what the Tracer has queued and the Meter's figures now, until `deadline`; true when
/// both exports finished (sent, or failed and counted) in time. Spans queued meanwhile by
/// other threads are waited for too.
bool flush_telemetry(std::chrono::steady_clock::time_point deadline);

}  // namespace oncely::detail
