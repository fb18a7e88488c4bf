#include "execution/attempt_spans.hpp"

#include <algorithm>

namespace oncely::detail {
namespace {

const char* outcome_name(JobEvent::Outcome o) {
  switch (o) {
    case JobEvent::Outcome::completed: return "completed";
    case JobEvent::Outcome::deduplicated: return "deduplicated";
    case JobEvent::Outcome::retried: return "retried";
    case JobEvent::Outcome::dead_lettered: return "dead_lettered";
    case JobEvent::Outcome::crashed: return "crashed";
    case JobEvent::Outcome::lease_stale: return "lease_stale";
  }
  return "unknown";
}

std::int64_t ns_since_epoch(std::chrono::system_clock::time_point t) { return unix_ns(t); }

Attributes common(const JobEvent& e, const char* operation) {
  Attributes a = {{"messaging.system", std::string("oncely")},
                  {"messaging.destination.name", e.queue},
                  {"messaging.operation.name", std::string(operation)},
                  {"messaging.operation.type", std::string(operation)},
                  {"messaging.message.id", std::to_string(e.id)},
                  {"oncely.job.kind", e.kind},
                  {"oncely.job.attempt", static_cast<std::int64_t>(e.attempt)},
                  {"oncely.job.outcome", std::string(outcome_name(e.outcome))}};
  if (e.key) a.emplace_back("oncely.job.key", *e.key);
  return a;
}

}  // namespace

std::vector<SpanRecord> attempt_spans(const JobEvent& e, const SpanContext& process, const std::string& settle_span_id,
                                      std::chrono::system_clock::time_point settled_at) {
  if (!process.sampled || e.outcome == JobEvent::Outcome::crashed) return {};
  const bool ran = e.started_at != std::chrono::system_clock::time_point{};
  const std::int64_t start = ns_since_epoch(ran ? e.started_at : settled_at);
  const std::int64_t handler_end =
      ran ? start + std::chrono::duration_cast<std::chrono::nanoseconds>(e.run_time).count() : start;
  const std::int64_t settled = std::max(handler_end, ns_since_epoch(settled_at));
  const bool failed = e.outcome == JobEvent::Outcome::retried || e.outcome == JobEvent::Outcome::dead_lettered;

  SpanRecord p;
  p.trace_id = process.trace_id;
  p.span_id = process.span_id;
  if (e.trace_context) {
    if (const auto parent = SpanContext::of(*e.trace_context); parent && parent->trace_id == process.trace_id) {
      p.parent_span_id = parent->span_id;
    }
  }
  p.name = "process " + e.queue;
  p.kind = SpanKind::consumer;
  p.start_unix_ns = start;
  p.end_unix_ns = handler_end;
  p.attributes = common(e, "process");
  p.attributes.emplace_back("oncely.job.wait_ms", static_cast<std::int64_t>(e.wait.count() / 1000));
  if (failed) {
    p.attributes.emplace_back("error.type", e.error_class);
    p.status = SpanStatus::error;
    p.status_message = e.error;
    if (e.outcome == JobEvent::Outcome::retried) {
      p.attributes.emplace_back("oncely.job.retry_delay_ms", static_cast<std::int64_t>(e.retry_delay.count()));
    }
  }
  if (e.outcome == JobEvent::Outcome::lease_stale) {
    p.status = SpanStatus::error;
    p.status_message = "its lease was lost before it finished: its outcome changed nothing";
    const bool noticed = e.lease_lost_at != std::chrono::system_clock::time_point{};
    p.events.push_back({"oncely.lease.lost",
                        std::clamp(noticed ? ns_since_epoch(e.lease_lost_at) : handler_end, start, handler_end),
                        {{"oncely.lease.noticed_by", std::string(noticed ? "renewal" : "completion")}}});
  }

  SpanRecord s;
  s.trace_id = process.trace_id;
  s.span_id = settle_span_id;
  s.parent_span_id = process.span_id;
  s.name = "settle " + e.queue;
  s.kind = SpanKind::client;
  s.start_unix_ns = handler_end;
  s.end_unix_ns = settled;
  s.attributes = common(e, "settle");
  if (failed) s.attributes.emplace_back("error.type", e.error_class);
  if (e.outcome == JobEvent::Outcome::lease_stale) {
    // The fenced completion found another token (or none): this attempt's outcome changed nothing.
    s.events.push_back({"oncely.completion.stale", settled, {}});
  }
  std::vector<SpanRecord> out;
  out.push_back(std::move(p));
  out.push_back(std::move(s));
  return out;
}

std::function<void(const JobEvent&)> traced(Tracer& tracer, std::function<void(const JobEvent&)> on_event) {
  return [&tracer, on_event = std::move(on_event)](const JobEvent& e) {
    if (e.outcome != JobEvent::Outcome::crashed) {
      std::optional<SpanContext> process =
          e.attempt_traceparent ? SpanContext::of(*e.attempt_traceparent) : std::nullopt;
      if (!process) process = tracer.start(e.trace_context);  // an outcome without a run
      for (SpanRecord& span : attempt_spans(e, *process, Tracer::new_span_id(), std::chrono::system_clock::now())) {
        tracer.submit(std::move(span));
      }
    }
    if (on_event) on_event(e);
  };
}

}  // namespace oncely::detail
