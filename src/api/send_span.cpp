#include "api/send_span.hpp"

#include <algorithm>

namespace oncely::detail {
namespace {

std::int64_t now_ns() { return unix_ns(std::chrono::system_clock::now()); }

}  // namespace

SendSpan::SendSpan(const NewJob& job) : tracer_(process_tracer()) {
  if (tracer_ == nullptr) return;
  context_ = tracer_->start(job.traceparent);
  parent_ = job.traceparent ? SpanContext::of(*job.traceparent) : std::nullopt;
  span_.name = "send " + job.queue;
  span_.start_unix_ns = now_ns();
  span_.attributes = {{"messaging.system", std::string("oncely")},
                      {"messaging.destination.name", job.queue},
                      {"messaging.operation.name", std::string("send")},
                      {"messaging.operation.type", std::string("send")},
                      {"oncely.job.kind", job.kind}};
  if (job.idempotency_key) span_.attributes.emplace_back("oncely.job.key", *job.idempotency_key);
}

SendSpan::SendSpan(const std::vector<NewJob>& jobs) : tracer_(jobs.empty() ? nullptr : process_tracer()) {
  if (tracer_ == nullptr) return;
  // The producer's context when every job carries the same one (one request's batch).
  const std::optional<std::string>& first = jobs.front().traceparent;
  const bool shared = std::ranges::all_of(jobs, [&](const NewJob& j) { return j.traceparent == first; });
  one_producer_ = shared;
  const std::optional<std::string> parent = shared ? first : std::nullopt;
  context_ = tracer_->start(parent);
  parent_ = parent ? SpanContext::of(*parent) : std::nullopt;
  const std::string& queue = jobs.front().queue;
  span_.name = "send " + queue;
  span_.start_unix_ns = now_ns();
  span_.attributes = {{"messaging.system", std::string("oncely")},
                      {"messaging.destination.name", queue},
                      {"messaging.operation.name", std::string("send")},
                      {"messaging.operation.type", std::string("send")},
                      {"messaging.batch.message_count", static_cast<std::int64_t>(jobs.size())}};
}

SendSpan::~SendSpan() {
  if (tracer_ != nullptr && !ended_) end(std::nullopt, true);
}

const NewJob& SendSpan::job(const NewJob& job) {
  if (tracer_ == nullptr) return job;
  stamped_ = job;
  stamped_->traceparent = context_.traceparent();
  return *stamped_;
}

const std::vector<NewJob>& SendSpan::jobs(const std::vector<NewJob>& jobs) {
  if (tracer_ == nullptr) return jobs;
  stamped_jobs_ = jobs;
  const std::string mine = context_.traceparent();
  for (NewJob& j : stamped_jobs_) {
    if (one_producer_ || !j.traceparent) j.traceparent = mine;
  }
  return stamped_jobs_;
}

void SendSpan::done(std::optional<std::int64_t> id) {
  if (tracer_ != nullptr) end(id, false);
}

void SendSpan::end(std::optional<std::int64_t> id, bool failed) {
  ended_ = true;
  if (!context_.sampled) return;
  span_.trace_id = context_.trace_id;
  span_.span_id = context_.span_id;
  if (parent_ && parent_->trace_id == context_.trace_id) span_.parent_span_id = parent_->span_id;
  span_.kind = SpanKind::producer;
  span_.end_unix_ns = now_ns();
  if (id) span_.attributes.emplace_back("messaging.message.id", std::to_string(*id));
  if (failed) {
    span_.status = SpanStatus::error;
    span_.status_message = "the enqueue failed";
    span_.attributes.emplace_back("error.type", std::string("enqueue_failed"));
  }
  tracer_->submit(std::move(span_));
}

}  // namespace oncely::detail
