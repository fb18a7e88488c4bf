#pragma once
// The spans of a job's attempt (docs/opentelemetry.md), made from the event that both
// executors emit once its outcome has committed (job_events.hpp): one place for both modes.
//   process {queue}  CONSUMER  the handler's run, under the job's stored traceparent
//   settle {queue}   CLIENT    from the handler's end until its outcome committed
// with the messaging conventions' attributes (messaging.system = oncely) and oncely.job.*.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "oncely/values.hpp"
#include "support/otel_metrics.hpp"
#include "support/otlp_spans.hpp"
#include "support/tracer.hpp"

namespace oncely::detail {

/// The process and settle spans of `event` (pure). `process`: the attempt's context (the
/// traceparent it ran under; for an outcome without a run, a new one); `settle_span_id`:
/// the settle span's id; `settled_at`: when the outcome committed. None for an unsampled
/// attempt, and for a crashed attempt's report (that attempt's process span died with it).
[[nodiscard]] std::vector<SpanRecord> attempt_spans(const JobEvent& event, const SpanContext& process,
                                                    const SpanId& settle_span_id,
                                                    std::chrono::system_clock::time_point settled_at);

/// `on_event` (may be empty) wrapped: each event's spans go to `tracer` and its attempt to
/// `meter`'s messaging metrics first (either may be null: not exported).
[[nodiscard]] std::function<void(const JobEvent&)> observed(Tracer* tracer, Meter* meter,
                                                            std::function<void(const JobEvent&)> on_event);

}  // namespace oncely::detail
