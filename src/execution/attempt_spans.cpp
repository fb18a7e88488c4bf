#include "execution/attempt_spans.hpp"

#include <algorithm>

#include "support/text.hpp"

namespace oncely::detail {
namespace {

// The longest text a span carries (an error message, a key): the queue bounds spans by
// count, and a handler's exception text has no bound of its own.
constexpr std::size_t kMostText = 1024;

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

// The attributes every process (settle) span carries, encoded once: a busy worker makes a
// hundred thousand spans a second, and these were a third of their cost.
std::string_view fixed_attributes(const char* operation) {
  // Never destroyed: the export thread may still be encoding when static destruction runs.
  static const std::string& process =
      *new std::string(encoded_attributes({{"messaging.system", std::string("oncely")},
                                           {"messaging.operation.name", std::string("process")},
                                           {"messaging.operation.type", std::string("process")}}));
  static const std::string& settle =
      *new std::string(encoded_attributes({{"messaging.system", std::string("oncely")},
                                           {"messaging.operation.name", std::string("settle")},
                                           {"messaging.operation.type", std::string("settle")}}));
  return std::string_view(operation) == "process" ? process : settle;
}

// What both spans say of their job. The settle span is the process span's child: the job's
// kind, attempt and key are on the parent, once.
Attributes common(const JobEvent& e, std::size_t more) {
  Attributes a;
  a.reserve(3 + more);
  a.emplace_back("messaging.destination.name", e.queue);
  a.emplace_back("messaging.message.id", std::to_string(e.id));
  a.emplace_back("oncely.job.outcome", std::string(outcome_name(e.outcome)));
  return a;
}

}  // namespace

std::vector<SpanRecord> attempt_spans(const JobEvent& e, const SpanContext& process, const SpanId& settle_span_id,
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
  // The producer's span, when the attempt's trace is the job's: the process context was made
  // from it (Tracer::start), so it is a traceparent and need not be checked again.
  if (e.trace_context && e.trace_context->size() >= 52 && process.trace_id == e.trace_context->substr(3, 32)) {
    p.parent_span_id = e.trace_context->substr(36, 16);
  }
  p.name = "process " + e.queue;
  p.kind = SpanKind::consumer;
  p.start_unix_ns = start;
  p.end_unix_ns = handler_end;
  p.fixed_attributes = fixed_attributes("process");
  p.attributes = common(e, 7);
  p.attributes.emplace_back("oncely.job.kind", e.kind);
  p.attributes.emplace_back("oncely.job.attempt", static_cast<std::int64_t>(e.attempt));
  if (e.key) p.attributes.emplace_back("oncely.job.key", utf8_head(*e.key, kMostText));
  p.attributes.emplace_back("oncely.job.wait_ms", static_cast<std::int64_t>(e.wait.count() / 1000));
  if (failed) {
    p.attributes.emplace_back("error.type", e.error_class);
    p.status = SpanStatus::error;
    p.status_message = utf8_head(e.error, kMostText);
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
  s.fixed_attributes = fixed_attributes("settle");
  s.attributes = common(e, 1);
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

std::function<void(const JobEvent&)> observed(Tracer* tracer, Meter* meter,
                                              std::function<void(const JobEvent&)> on_event) {
  return [tracer, meter, on_event = std::move(on_event)](const JobEvent& e) {
    if (tracer != nullptr && e.outcome != JobEvent::Outcome::crashed) {
      // The attempt's own context (it ran under it), or for an outcome without a run a new one.
      const SpanContext process =
          e.attempt_traceparent ? SpanContext::of_own(*e.attempt_traceparent) : tracer->start(e.trace_context);
      std::vector<SpanRecord> spans =
          attempt_spans(e, process, Tracer::new_span_id(), std::chrono::system_clock::now());
      tracer->submit(spans);
    }
    if (meter != nullptr) {
      // An attempt that ran: not a duplicate (nothing ran), nor a crash report (counted by
      // the attempt that ran into it).
      const bool failed = e.outcome == JobEvent::Outcome::retried || e.outcome == JobEvent::Outcome::dead_lettered;
      if (failed || e.outcome == JobEvent::Outcome::completed || e.outcome == JobEvent::Outcome::lease_stale) {
        meter->metrics().processed(e.queue,
                                   failed                                        ? std::string_view(e.error_class)
                                   : e.outcome == JobEvent::Outcome::lease_stale ? std::string_view("lease_stale")
                                                                                 : std::string_view(),
                                   std::chrono::duration<double>(e.run_time).count());
      }
    }
    if (on_event) on_event(e);
  };
}

}  // namespace oncely::detail
