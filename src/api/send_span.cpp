#include "api/send_span.hpp"

#include <algorithm>

#include "support/text.hpp"

namespace oncely::detail {
namespace {

std::int64_t now_ns() { return unix_ns(std::chrono::system_clock::now()); }

// A batch may span queues: then it names none.
Attributes send_attributes(const std::optional<std::string>& queue) {
  Attributes a = {{"messaging.system", std::string("oncely")},
                  {"messaging.operation.name", std::string("send")},
                  {"messaging.operation.type", std::string("send")}};
  if (queue) a.emplace_back("messaging.destination.name", *queue);
  return a;
}

}  // namespace

SendSpan::SendSpan(const NewJob& job) : tracer_(process_tracer()), meter_(process_meter()), queue_(job.queue) {
  started_ = std::chrono::steady_clock::now();
  if (tracer_ == nullptr) return;
  context_ = tracer_->start(job.traceparent);
  parent_ = job.traceparent ? SpanContext::of(*job.traceparent) : std::nullopt;
  span_.start_unix_ns = now_ns();
  span_.attributes = send_attributes(job.queue);
  span_.attributes.emplace_back("oncely.job.kind", job.kind);
  if (job.idempotency_key) span_.attributes.emplace_back("oncely.job.key", utf8_head(*job.idempotency_key, 1024));
}

SendSpan::SendSpan(const std::vector<NewJob>& jobs)
    : tracer_(jobs.empty() ? nullptr : process_tracer()),
      meter_(jobs.empty() ? nullptr : process_meter()),
      queue_(jobs.empty() ? std::string() : jobs.front().queue),
      messages_(static_cast<std::int64_t>(jobs.size())) {
  started_ = std::chrono::steady_clock::now();
  one_queue_ = std::ranges::all_of(jobs, [&](const NewJob& j) { return j.queue == queue_; });
  if (meter_ != nullptr && !one_queue_) {
    for (const NewJob& j : jobs) ++sent_by_queue_[j.queue];
  }
  if (tracer_ == nullptr) return;
  // The producer's context when every job carries the same one (one request's batch).
  const std::optional<std::string>& first = jobs.front().traceparent;
  one_producer_ = std::ranges::all_of(jobs, [&](const NewJob& j) { return j.traceparent == first; });
  const std::optional<std::string> parent = one_producer_ ? first : std::nullopt;
  context_ = tracer_->start(parent);
  parent_ = parent ? SpanContext::of(*parent) : std::nullopt;
  span_.start_unix_ns = now_ns();
  span_.attributes = send_attributes(one_queue_ ? std::optional(queue_) : std::nullopt);
  span_.attributes.emplace_back("messaging.batch.message_count", messages_);
}

SendSpan::~SendSpan() {
  if (!ended_) end(std::nullopt, true);
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

void SendSpan::done(std::optional<std::int64_t> id) { end(id, false); }

void SendSpan::end(std::optional<std::int64_t> id, bool failed) {
  ended_ = true;
  if (meter_ != nullptr) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    const std::string_view error_type = failed ? "enqueue_failed" : "";
    if (sent_by_queue_.empty()) meter_->metrics().sent(queue_, error_type, seconds, messages_);
    for (const auto& [queue, messages] : sent_by_queue_) meter_->metrics().sent(queue, error_type, seconds, messages);
  }
  if (tracer_ == nullptr || !context_.sampled) return;
  span_.name = one_queue_ ? "send " + queue_ : std::string("send");
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
