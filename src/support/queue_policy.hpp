#pragma once
// A queue's policy: the part of its configuration that every worker of the queue must apply
// alike, whatever its language (mode, lease, attempts, backoff, job timeout, and the limits
// across workers), as stored in the queue_policies and queue_limits tables (migrations 18
// and 22). Pure: which keys two policies differ in.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "oncely/config.hpp"

namespace oncely::detail {

/// The policy keys in which `stored` and `wanted` differ, named as `oncely queue set` and
/// the configuration file name them: mode, lease, max_attempts, backoff.base, backoff.cap,
/// backoff.jitter, backoff.schedule, job_timeout, limits. A transaction queue's lease is not
/// compared (it is not used). Empty when they agree.
[[nodiscard]] std::vector<std::string> policy_differences(const QueueConfig& stored, const QueueConfig& wanted);

/// "full", "equal" or "none", as the configuration file and the queue_policies table say it.
[[nodiscard]] std::string_view jitter_name(BackoffConfig::Jitter jitter) noexcept;
/// The jitter named so (anything else: equal, the default).
[[nodiscard]] BackoffConfig::Jitter jitter_named(std::string_view name) noexcept;

/// A queue's policy as the configuration file writes it: mode, lease (a lease queue's only),
/// max_attempts, backoff (base, cap and jitter, or schedule) and job_timeout, durations as
/// exact strings ("90s"). Config::parse reads it back.
[[nodiscard]] nlohmann::json policy_json(const QueueConfig& queue);

/// A queue's limits as the configuration file writes them (only the limits that are set).
[[nodiscard]] nlohmann::json limits_json(const QueueLimits& limits);

}  // namespace oncely::detail
