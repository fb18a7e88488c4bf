#pragma once
// The `send` span of one enqueue (docs/opentelemetry.md): with export on, the job is stored
// with the send span's context as its traceparent, so that every attempt of the job is a
// child of it, and the span's own parent is the traceparent the producer gave (none: a new
// trace). With export off it does nothing and the job goes as it was given. With metrics
// on (OTEL_METRICS_EXPORTER=otlp) it also counts the messages sent and times the call.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oncely/values.hpp"
#include "support/telemetry.hpp"

namespace oncely::detail {

class SendSpan {
 public:
  /// For one job.
  explicit SendSpan(const NewJob& job);
  /// For a batch of jobs enqueued together: one span; jobs with no traceparent of their own
  /// take its context, the others keep theirs.
  explicit SendSpan(const std::vector<NewJob>& jobs);
  /// Not ended by done(): the enqueue threw, and the span says it failed.
  ~SendSpan();
  SendSpan(const SendSpan&) = delete;
  SendSpan& operator=(const SendSpan&) = delete;

  /// The job to enqueue: `job` itself, or a copy carrying the span's context.
  [[nodiscard]] const NewJob& job(const NewJob& job);
  /// The jobs to enqueue, as job() does for one.
  [[nodiscard]] const std::vector<NewJob>& jobs(const std::vector<NewJob>& jobs);
  /// The enqueue returned: ends the span, naming the job (none when several or none).
  void done(std::optional<std::int64_t> id);

 private:
  void end(std::optional<std::int64_t> id, bool failed);

  Tracer* tracer_ = nullptr;
  Meter* meter_ = nullptr;
  std::string queue_;
  std::int64_t messages_ = 1;
  bool one_queue_ = true;                              // a batch's jobs all go to queue_
  std::map<std::string, std::int64_t> sent_by_queue_;  // a batch over several queues, with metrics on
  std::chrono::steady_clock::time_point started_;
  SpanContext context_;
  std::optional<SpanContext> parent_;
  SpanRecord span_;
  std::optional<NewJob> stamped_;
  std::vector<NewJob> stamped_jobs_;
  bool one_producer_ = true;  // a batch whose jobs all carry the same traceparent (or none)
  bool ended_ = false;
};

}  // namespace oncely::detail
