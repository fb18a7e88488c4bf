#include "support/queue_policy.hpp"

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
  return keys;
}

}  // namespace oncely::detail
