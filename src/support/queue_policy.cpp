#include "support/queue_policy.hpp"

#include "support/duration.hpp"

namespace oncely::detail {

std::vector<std::string> policy_differences(const QueueConfig& stored, const QueueConfig& wanted) {
  std::vector<std::string> keys;
  const auto differ = [&](bool different, const char* key) {
    if (different) keys.emplace_back(key);
  };
  differ(stored.mode != wanted.mode, "mode");
  differ(wanted.mode == QueueConfig::Mode::lease && stored.lease != wanted.lease, "lease");
  differ(stored.max_attempts != wanted.max_attempts, "max_attempts");
  // A schedule replaces base, cap and jitter: those are compared only without one.
  const bool scheduled = !wanted.backoff.schedule.empty();
  differ(!scheduled && stored.backoff.base != wanted.backoff.base, "backoff.base");
  differ(!scheduled && stored.backoff.cap != wanted.backoff.cap, "backoff.cap");
  differ(!scheduled && stored.backoff.jitter != wanted.backoff.jitter, "backoff.jitter");
  differ(stored.backoff.schedule != wanted.backoff.schedule, "backoff.schedule");
  differ(stored.job_timeout != wanted.job_timeout, "job_timeout");
  const auto limits = [](const QueueConfig& q) { return q.limits ? limits_json(*q.limits) : nlohmann::json(); };
  differ(limits(stored) != limits(wanted), "limits");
  return keys;
}

std::string_view jitter_name(BackoffConfig::Jitter jitter) noexcept {
  switch (jitter) {
    case BackoffConfig::Jitter::full: return "full";
    case BackoffConfig::Jitter::none: return "none";
    case BackoffConfig::Jitter::equal: break;
  }
  return "equal";
}

BackoffConfig::Jitter jitter_named(std::string_view name) noexcept {
  if (name == "full") return BackoffConfig::Jitter::full;
  if (name == "none") return BackoffConfig::Jitter::none;
  return BackoffConfig::Jitter::equal;
}

nlohmann::json policy_json(const QueueConfig& queue) {
  const bool lease = queue.mode == QueueConfig::Mode::lease;
  nlohmann::json policy{{"mode", lease ? "lease" : "transaction"}};
  if (lease) policy["lease"] = format_duration(queue.lease);
  policy["max_attempts"] = queue.max_attempts;
  if (queue.backoff.schedule.empty()) {
    policy["backoff"] = {{"base", format_duration(queue.backoff.base)},
                         {"cap", format_duration(queue.backoff.cap)},
                         {"jitter", jitter_name(queue.backoff.jitter)}};
  } else {
    nlohmann::json schedule = nlohmann::json::array();
    for (const auto d : queue.backoff.schedule) schedule.push_back(format_duration(d));
    policy["backoff"] = {{"schedule", schedule}};
  }
  policy["job_timeout"] = format_duration(queue.job_timeout);
  if (queue.limits) policy["limits"] = limits_json(*queue.limits);
  return policy;
}

nlohmann::json limits_json(const QueueLimits& limits) {
  nlohmann::json j = nlohmann::json::object();
  if (limits.concurrency) j["concurrency"] = *limits.concurrency;
  if (limits.key) j["key"] = *limits.key;
  if (limits.per_key_concurrency) j["per_key_concurrency"] = *limits.per_key_concurrency;
  const auto rate = [](const StartRate& r) { return std::to_string(r.count) + "/" + format_duration(r.period); };
  if (limits.rate) j["rate"] = rate(*limits.rate);
  if (limits.per_key_rate) j["per_key_rate"] = rate(*limits.per_key_rate);
  return j;
}

}  // namespace oncely::detail
