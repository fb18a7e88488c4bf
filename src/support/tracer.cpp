#include "support/tracer.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"
#include "support/text.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {
namespace {

constexpr char kHex[] = "0123456789abcdef";

// 16 lower-case hex digits of `v` at `out`.
void put_hex64(char* out, std::uint64_t v) {
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = kHex[v & 0xf];
}

std::uint64_t random_nonzero() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uint64_t v = 0;
  while (v == 0) v = rng();
  return v;
}

// A failing collector is logged when it starts failing, then at most once a minute.
constexpr auto kFailureLogInterval = std::chrono::minutes(1);

}  // namespace

std::string SpanContext::traceparent() const {
  std::string out;
  out.reserve(55);
  out += "00-";
  out += trace_id.view();
  out += '-';
  out += span_id.view();
  out += sampled ? "-01" : "-00";
  return out;
}

SpanContext SpanContext::of_own(std::string_view traceparent) {
  return SpanContext{traceparent.substr(3, 32), traceparent.substr(36, 16), traceparent[54] == '1'};
}

std::optional<SpanContext> SpanContext::of(std::string_view traceparent) {
  if (!is_traceparent(traceparent)) return std::nullopt;
  const char low = traceparent[54];  // the flags' low hex digit holds "sampled"
  const int flags = low >= 'a' ? low - 'a' + 10 : low - '0';
  return SpanContext{traceparent.substr(3, 32), traceparent.substr(36, 16), (flags & 1) != 0};
}

bool sample_root(Sampler sampler, double ratio, std::string_view trace_id) {
  switch (sampler) {
    case Sampler::always_on:
    case Sampler::parent_based_always_on: return true;
    case Sampler::always_off:
    case Sampler::parent_based_always_off: return false;
    case Sampler::trace_id_ratio:
    case Sampler::parent_based_trace_id_ratio: {
      // The trace id's low 8 bytes against ratio * 2^64: every worker and SDK that samples
      // by the same rule keeps the same traces.
      if (ratio >= 1.0) return true;
      const std::uint64_t low = std::stoull(std::string(trace_id.substr(16, 16)), nullptr, 16);
      return static_cast<double>(low) < ratio * 18446744073709551616.0;
    }
  }
  return false;
}

bool sample(Sampler sampler, double ratio, const std::optional<SpanContext>& parent, std::string_view trace_id) {
  const bool parent_based = sampler == Sampler::parent_based_always_on || sampler == Sampler::parent_based_always_off ||
                            sampler == Sampler::parent_based_trace_id_ratio;
  if (parent && parent_based) return parent->sampled;
  return sample_root(sampler, ratio, trace_id);
}

std::int64_t unix_ns(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

Tracer::Tracer(OtelSettings settings, std::shared_ptr<spdlog::logger> log)
    : settings_(std::move(settings)),
      log_(std::move(log)),
      sender_(std::make_unique<OtlpSender>(settings_.traces.url, settings_.traces.headers, settings_.traces.timeout)) {
  queue_.reserve(std::min<std::size_t>(settings_.max_queue_size, 4096));
  thread_ = ServiceThread([this](const std::stop_token& stop) { export_loop(stop); });
}

Tracer::~Tracer() { thread_.stop_until(std::chrono::steady_clock::now() + std::chrono::seconds(1)); }

SpanContext Tracer::start(const std::optional<std::string>& parent) {
  std::optional<SpanContext> from = parent ? SpanContext::of(*parent) : std::nullopt;
  SpanContext c;
  if (from) {
    c.trace_id = from->trace_id;
  } else {
    put_hex64(c.trace_id.hex.data(), random_nonzero());
    put_hex64(c.trace_id.hex.data() + 16, random_nonzero());
  }
  c.span_id = new_span_id();
  c.sampled = sample(settings_.sampler, settings_.ratio, from, c.trace_id.view());
  return c;
}

SpanId Tracer::new_span_id() {
  SpanId id;
  put_hex64(id.hex.data(), random_nonzero());
  return id;
}

void yield_to_jobs() {
  // Nice 10 for this thread alone (Linux: a thread's own priority): on a busy machine the
  // export waits for idle CPU rather than the jobs for it, and what cannot wait is dropped
  // (counted) when the queue is full.
  static_cast<void>(setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10));
}

void Tracer::submit(std::vector<SpanRecord>& spans) {
  bool full_batch = false;
  {
    std::lock_guard lock(mutex_);
    for (SpanRecord& span : spans) {
      if (queue_.size() >= settings_.max_queue_size) {
        dropped_queue_full_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      queue_.push_back(std::move(span));
      full_batch = full_batch || queue_.size() == settings_.max_batch_size;
    }
  }
  if (full_batch) wake_.notify_one();
}

void Tracer::submit(SpanRecord span) {
  bool full_batch = false;
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() >= settings_.max_queue_size) {
      dropped_queue_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(span));
    full_batch = queue_.size() == settings_.max_batch_size;
  }
  if (full_batch) wake_.notify_one();
}

bool Tracer::flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  const std::uint64_t ticket = ++flush_wanted_;
  wake_.notify_one();
  return idle_.wait_until(lock, deadline, [&] { return flush_done_ >= ticket; });
}

ExportCounts Tracer::counts() const {
  return {exported_.load(), dropped_queue_full_.load(), dropped_export_failed_.load(), failed_exports_.load()};
}

void Tracer::set_log(std::shared_ptr<spdlog::logger> log) {
  std::lock_guard lock(mutex_);
  log_ = std::move(log);
}

std::shared_ptr<spdlog::logger> Tracer::log() const {
  std::lock_guard lock(mutex_);
  return log_;
}

void Tracer::note_result(std::size_t spans, const std::optional<std::string>& failure) {
  const auto log = this->log();
  if (!failure) {
    exported_.fetch_add(spans);
    if (failing_ && log) log->info("otel export works again url={}", display_url(sender_->url()));
    failing_ = false;
    return;
  }
  failed_exports_.fetch_add(1);
  dropped_export_failed_.fetch_add(spans);
  const auto now = std::chrono::steady_clock::now();
  if (log && (!failing_ || now - last_failure_log_ >= kFailureLogInterval)) {
    log->warn("otel export failed url={} error={}; its spans are dropped (dropped so far: {})",
              display_url(sender_->url()), *failure, dropped_export_failed_.load() + dropped_queue_full_.load());
    last_failure_log_ = now;
  }
  failing_ = true;
}

void Tracer::export_loop(const std::stop_token& stop) {
  yield_to_jobs();
  std::stop_token abort = stop;  // a POST in flight at the stop is abandoned
  std::vector<SpanRecord> taken;
  while (true) {
    std::uint64_t flushing = 0;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, stop, settings_.schedule_delay,
                     [&] { return queue_.size() >= settings_.max_batch_size || flush_wanted_ > flush_done_; });
      if (stop.stop_requested()) return;
      flushing = flush_wanted_;
      if (queue_.empty()) {
        flush_done_ = flushing;
        idle_.notify_all();
        continue;
      }
      // The whole queue at once, not span by span: the job threads find an empty queue (with
      // its capacity) and this thread encodes, and frees, without the lock.
      std::swap(taken, queue_);
    }
    for (std::size_t from = 0; from < taken.size(); from += settings_.max_batch_size) {
      const std::size_t to = std::min(taken.size(), from + settings_.max_batch_size);
      try {
        note_result(to - from, sender_->post(otlp_json(settings_.resource, ONCELY_VERSION, taken, from, to), abort));
      } catch (const std::exception& e) {
        note_result(to - from, summary_line(e.what(), 200));
      }
    }
    taken.clear();
    std::lock_guard lock(mutex_);
    // A flush is done when what was queued at its call has gone: the queue is empty now.
    if (queue_.empty()) {
      flush_done_ = flushing;
      idle_.notify_all();
    }
  }
}

}  // namespace oncely::detail
