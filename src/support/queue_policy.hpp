#pragma once
// A queue's policy: the part of its configuration that every worker of the queue must apply
// alike, whatever its language (mode, lease, attempts, backoff, job timeout), as stored in
// the queue_policies table (migration 18). Pure: which keys two policies differ in.

#include <string>
#include <vector>

#include "oncely/config.hpp"

namespace oncely::detail {

/// The policy keys in which `stored` and `wanted` differ, named as `oncely queue set` and
/// the configuration file name them: mode, lease, max_attempts, backoff.base, backoff.cap,
/// backoff.jitter, backoff.schedule, job_timeout. A transaction queue's lease is not
/// compared (it is not used). Empty when they agree.
[[nodiscard]] std::vector<std::string> policy_differences(const QueueConfig& stored, const QueueConfig& wanted);

}  // namespace oncely::detail
