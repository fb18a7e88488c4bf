#include "support/tracer.hpp"

#include <algorithm>
#include <cstdlib>
#include <random>

#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"
#include "support/curl_handles.hpp"
#include "support/text.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {
namespace {

constexpr char kHex[] = "0123456789abcdef";

std::string hex64(std::uint64_t v) {
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kHex[v & 0xf];
  return out;
}

std::uint64_t random_nonzero() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uint64_t v = 0;
  while (v == 0) v = rng();
  return v;
}

// A failing collector is logged when it starts failing, then at most once a minute.
constexpr auto kFailureLogInterval = std::chrono::minutes(1);

std::size_t keep_head(char* data, std::size_t size, std::size_t count, void* out) {
  auto* head = static_cast<std::string*>(out);
  const std::size_t n = size * count;
  if (head->size() < 200) head->append(data, std::min(n, 200 - head->size()));
  return n;
}

int abort_when_stopped(void* stop, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<std::stop_token*>(stop)->stop_requested() ? 1 : 0;
}

}  // namespace

std::string SpanContext::traceparent() const { return "00-" + trace_id + "-" + span_id + (sampled ? "-01" : "-00"); }

std::optional<SpanContext> SpanContext::of(std::string_view traceparent) {
  if (!is_traceparent(traceparent)) return std::nullopt;
  const int flags = std::stoi(std::string(traceparent.substr(53, 2)), nullptr, 16);
  return SpanContext{std::string(traceparent.substr(3, 32)), std::string(traceparent.substr(36, 16)), (flags & 1) != 0};
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

// The thread's HTTP client: one easy handle, kept (with its connection) between POSTs.
struct Tracer::Sender {
  std::unique_ptr<CURL, EasyDeleter> easy;
  std::unique_ptr<curl_slist, SlistDeleter> headers;

  explicit Sender(const OtelSettings& s) {
    init_curl_once();
    easy.reset(curl_easy_init());
    if (!easy) throw Error("curl_easy_init failed");
    const auto add = [&](const std::string& line) {
      curl_slist* grown = curl_slist_append(headers.get(), line.c_str());
      if (grown == nullptr) throw Error("curl_slist_append failed");
      headers.release();
      headers.reset(grown);
    };
    add("Content-Type: application/json");
    for (const auto& [name, value] : s.headers) add(name + ": " + value);
  }

  // The POST's failure, one line without the URL's secrets or the headers; none: accepted.
  std::optional<std::string> post(const OtelSettings& s, const std::string& body, std::stop_token& stop) {
    CURL* e = easy.get();
    std::string response_head;
    std::array<char, CURL_ERROR_SIZE> error{};
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, s.traces_url.c_str());
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(e, CURLOPT_USERAGENT, "oncely/" ONCELY_VERSION);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(s.export_timeout.count()));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(s.export_timeout.count()));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, keep_head);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &response_head);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error.data());
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, abort_when_stopped);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, &stop);
    const CURLcode rc = curl_easy_perform(e);
    if (rc != CURLE_OK) {
      // curl's message may name the URL: the part without user info and query only.
      std::string why = error[0] != 0 ? error.data() : curl_easy_strerror(rc);
      replace_all(why, s.traces_url, display_url(s.traces_url));
      return summary_line(why, 200);
    }
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) return std::nullopt;
    return "HTTP " + std::to_string(status) + (response_head.empty() ? "" : ": " + summary_line(response_head, 120));
  }
};

Tracer::Tracer(OtelSettings settings, std::shared_ptr<spdlog::logger> log)
    : settings_(std::move(settings)), log_(std::move(log)), sender_(std::make_unique<Sender>(settings_)) {
  thread_ = ServiceThread([this](const std::stop_token& stop) { export_loop(stop); });
}

Tracer::~Tracer() { thread_.stop_until(std::chrono::steady_clock::now() + std::chrono::seconds(1)); }

SpanContext Tracer::start(const std::optional<std::string>& parent) {
  std::optional<SpanContext> from = parent ? SpanContext::of(*parent) : std::nullopt;
  SpanContext c;
  c.trace_id = from ? from->trace_id : hex64(random_nonzero()) + hex64(random_nonzero());
  c.span_id = new_span_id();
  c.sampled = sample(settings_.sampler, settings_.ratio, from, c.trace_id);
  return c;
}

std::string Tracer::new_span_id() { return hex64(random_nonzero()); }

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
    if (failing_ && log) log->info("otel export works again url={}", display_url(settings_.traces_url));
    failing_ = false;
    return;
  }
  failed_exports_.fetch_add(1);
  dropped_export_failed_.fetch_add(spans);
  const auto now = std::chrono::steady_clock::now();
  if (log && (!failing_ || now - last_failure_log_ >= kFailureLogInterval)) {
    log->warn("otel export failed url={} error={}; its spans are dropped (dropped so far: {})",
              display_url(settings_.traces_url), *failure, dropped_export_failed_.load() + dropped_queue_full_.load());
    last_failure_log_ = now;
  }
  failing_ = true;
}

void Tracer::export_loop(const std::stop_token& stop) {
  std::stop_token abort = stop;  // a POST in flight at the stop is abandoned
  while (true) {
    std::vector<SpanRecord> batch;
    std::uint64_t flushing = 0;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, stop, settings_.schedule_delay,
                     [&] { return queue_.size() >= settings_.max_batch_size || flush_wanted_ > flush_done_; });
      if (stop.stop_requested()) return;
      flushing = flush_wanted_;
      const std::size_t n = std::min(queue_.size(), settings_.max_batch_size);
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + n));
      queue_.erase(queue_.begin(), queue_.begin() + n);
      if (batch.empty()) {
        flush_done_ = flushing;
        idle_.notify_all();
        continue;
      }
    }
    try {
      note_result(batch.size(), sender_->post(settings_, otlp_json(settings_.resource, ONCELY_VERSION, batch), abort));
    } catch (const std::exception& e) {
      note_result(batch.size(), summary_line(e.what(), 200));
    }
    std::lock_guard lock(mutex_);
    // A flush is done when what was queued at its call has gone: the queue is empty now.
    if (queue_.empty()) {
      flush_done_ = flushing;
      idle_.notify_all();
    }
  }
}

Tracer* process_tracer() {
  struct Made {
    Tracer* tracer = nullptr;
    std::optional<ConfigError> error;
  };
  static const Made made = [] {
    Made m;
    try {
      OtelSettings s = read_otel_settings([](const char* name) { return std::getenv(name); }, "oncely");
      if (!s.enabled) return m;
      auto log = spdlog::default_logger();
      for (const std::string& warning : s.warnings) log->warn("{}", warning);
      m.tracer = new Tracer(std::move(s), std::move(log));  // never destroyed: see the header
    } catch (const ConfigError& e) {
      m.error = e;
    }
    return m;
  }();
  if (made.error) throw *made.error;
  return made.tracer;
}

bool flush_process_tracer(std::chrono::steady_clock::time_point deadline) {
  Tracer* tracer = nullptr;
  try {
    tracer = process_tracer();
  } catch (const ConfigError&) {
    return true;  // nothing was ever exported
  }
  return tracer == nullptr || tracer->flush(deadline);
}

}  // namespace oncely::detail
