#include "support/otel_metrics.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "support/tracer.hpp"

namespace oncely::detail {
namespace {

using nlohmann::json;

constexpr auto kFailureLogInterval = std::chrono::minutes(1);

json attributes_of(const std::string& operation, const std::string& queue, const std::string& error_type) {
  json a = json::array({{{"key", "messaging.system"}, {"value", {{"stringValue", "oncely"}}}},
                        {{"key", "messaging.destination.name"}, {"value", {{"stringValue", queue}}}},
                        {{"key", "messaging.operation.name"}, {"value", {{"stringValue", operation}}}}});
  if (!error_type.empty()) a.push_back({{"key", "error.type"}, {"value", {{"stringValue", error_type}}}});
  return a;
}

}  // namespace

void MessagingMetrics::add(const Key& key, double seconds, std::int64_t messages) {
  const std::size_t bucket = static_cast<std::size_t>(std::ranges::lower_bound(kBounds, seconds) -
                                                      kBounds.begin());  // bounds are inclusive upper limits
  std::lock_guard lock(mutex_);
  Series& s = series_[key];
  if (s.buckets.empty()) s.buckets.assign(kBounds.size() + 1, 0);
  s.messages += messages;
  ++s.count;
  s.sum += seconds;
  ++s.buckets[bucket];
}

void MessagingMetrics::processed(std::string_view queue, std::string_view error_type, double seconds) {
  add({"process", std::string(queue), std::string(error_type)}, seconds, 1);
}

void MessagingMetrics::sent(std::string_view queue, std::string_view error_type, double seconds,
                            std::int64_t messages) {
  add({"send", std::string(queue), std::string(error_type)}, seconds, messages);
}

std::string MessagingMetrics::otlp_json(const std::vector<std::pair<std::string, std::string>>& resource,
                                        const std::string& version, std::int64_t now_unix_ns) const {
  json counts_sent = json::array(), counts_consumed = json::array(), durations_send = json::array(),
       durations_process = json::array();
  std::map<Key, Series> series;
  {
    std::lock_guard lock(mutex_);  // a copy, encoded without the lock that every outcome takes
    series = series_;
  }
  {
    for (const auto& [key, s] : series) {
      const auto& [operation, queue, error_type] = key;
      const json attributes = attributes_of(operation, queue, error_type);
      const json count = {{"attributes", attributes},
                          {"startTimeUnixNano", std::to_string(start_unix_ns_)},
                          {"timeUnixNano", std::to_string(now_unix_ns)},
                          {"asInt", std::to_string(s.messages)}};
      json buckets = json::array();
      for (const std::uint64_t b : s.buckets) buckets.push_back(std::to_string(b));
      const json histogram = {{"attributes", attributes},
                              {"startTimeUnixNano", std::to_string(start_unix_ns_)},
                              {"timeUnixNano", std::to_string(now_unix_ns)},
                              {"count", std::to_string(s.count)},
                              {"sum", s.sum},
                              {"bucketCounts", std::move(buckets)},
                              {"explicitBounds", kBounds}};
      (operation == "send" ? counts_sent : counts_consumed).push_back(count);
      (operation == "send" ? durations_send : durations_process).push_back(histogram);
    }
  }
  constexpr int kCumulative = 2;  // AggregationTemporality
  const auto sum = [&](const char* name, const char* description, json points) {
    return json{
        {"name", name},
        {"description", description},
        {"unit", "{message}"},
        {"sum", {{"dataPoints", std::move(points)}, {"aggregationTemporality", kCumulative}, {"isMonotonic", true}}}};
  };
  const auto histogram = [&](const char* name, const char* description, json points) {
    return json{{"name", name},
                {"description", description},
                {"unit", "s"},
                {"histogram", {{"dataPoints", std::move(points)}, {"aggregationTemporality", kCumulative}}}};
  };
  json metrics = json::array();
  if (!counts_sent.empty()) {
    metrics.push_back(sum("messaging.client.sent.messages", "Messages (jobs) enqueued", std::move(counts_sent)));
    metrics.push_back(
        histogram("messaging.client.operation.duration", "How long an enqueue took", std::move(durations_send)));
  }
  if (!counts_consumed.empty()) {
    metrics.push_back(
        sum("messaging.client.consumed.messages", "Attempts of jobs that ran", std::move(counts_consumed)));
    metrics.push_back(
        histogram("messaging.process.duration", "How long a job's handler ran", std::move(durations_process)));
  }
  json resource_attributes = json::array();
  for (const auto& [key, value] : resource) {
    resource_attributes.push_back({{"key", key}, {"value", {{"stringValue", value}}}});
  }
  const json request = {
      {"resourceMetrics",
       json::array({{{"resource", {{"attributes", std::move(resource_attributes)}}},
                     {"scopeMetrics", json::array({{{"scope", {{"name", "oncely"}, {"version", version}}},
                                                    {"metrics", std::move(metrics)}}})}}})}};
  return request.dump(-1, ' ', false, json::error_handler_t::replace);
}

Meter::Meter(OtelSettings settings, std::shared_ptr<spdlog::logger> log)
    : settings_(std::move(settings)),
      metrics_(unix_ns(std::chrono::system_clock::now())),
      sender_(settings_.metrics.url, settings_.metrics.headers, settings_.metrics.timeout),
      log_(std::move(log)) {
  thread_ = ServiceThread([this](const std::stop_token& stop) { export_loop(stop); });
}

Meter::~Meter() { thread_.stop_until(std::chrono::steady_clock::now() + std::chrono::seconds(1)); }

void Meter::set_log(std::shared_ptr<spdlog::logger> log) {
  std::lock_guard lock(mutex_);
  log_ = std::move(log);
}

bool Meter::flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  const std::uint64_t ticket = ++flush_wanted_;
  wake_.notify_one();
  return idle_.wait_until(lock, deadline, [&] { return flush_done_ >= ticket; });
}

void Meter::export_now(const std::stop_token& stop) {
  const std::optional<std::string> failure = sender_.post(
      metrics_.otlp_json(settings_.resource, ONCELY_VERSION, unix_ns(std::chrono::system_clock::now())), stop);
  std::shared_ptr<spdlog::logger> log;
  {
    std::lock_guard lock(mutex_);
    log = log_;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!failure) {
    if (failing_ && log) log->info("otel metrics export works again url={}", display_url(sender_.url()));
    failing_ = false;
  } else {
    if (log && (!failing_ || now - last_failure_log_ >= kFailureLogInterval)) {
      log->warn("otel metrics export failed url={} error={}; trying again at the next interval",
                display_url(sender_.url()), *failure);
      last_failure_log_ = now;
    }
    failing_ = true;
  }
}

void Meter::export_loop(const std::stop_token& stop) {
  yield_to_jobs();
  while (true) {
    std::uint64_t flushing = 0;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, stop, settings_.metric_interval, [&] { return flush_wanted_ > flush_done_; });
      if (stop.stop_requested()) return;
      flushing = flush_wanted_;
    }
    try {
      export_now(stop);
    } catch (const std::exception&) {
      failing_ = true;  // the sender's own failure (out of memory): the next interval tries again
    }
    std::lock_guard lock(mutex_);
    flush_done_ = flushing;
    idle_.notify_all();
  }
}

}  // namespace oncely::detail
