#pragma once
// Queue control: pause, resume and list queues. A pause is a row in the database: every
// worker stops claiming from the queue within a second (running jobs finish; producers go
// on enqueueing), including workers started while it holds, until the queue is resumed.
// Each function opens a connection of its own and runs in a transaction of its own;
// errors: DatabaseError (unreachable, or the schema is not migrated), ConfigError for a
// queue name that cannot be one.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <utility>

#include "oncely/config.hpp"
#include "oncely/database_url.hpp"
#include "oncely/records.hpp"

namespace oncely {

/// Pauses `queue` (the queue need not have jobs yet). Pausing a paused queue keeps its
/// first pause (time, reason, who) and returns it; `newly` says which happened.
PauseResult pause_queue(const DatabaseUrl& url, std::string_view schema, const std::string& queue,
                        const std::optional<std::string>& reason = std::nullopt);

/// Resumes `queue`; returns the pause it ended, or nothing when it was not paused.
std::optional<QueuePause> resume_queue(const DatabaseUrl& url, std::string_view schema, const std::string& queue);

/// Every queue known from jobs, from `configured`, from registered workers, from pauses
/// or from its queue_policies row, by name, each with its policy (its row, or the
/// defaults, as queue_policy() returns them).
std::vector<QueueInfo> list_queues(const DatabaseUrl& url, std::string_view schema,
                                   const std::vector<std::string>& configured = {});

/// A queue's policy as every worker of it applies it (the queue_policies table, or the
/// defaults when it has no row): mode, lease, max_attempts, backoff and job_timeout of the
/// returned QueueConfig; `stored` says whether it has a row.
struct QueuePolicy {
  QueueConfig policy;
  bool stored = false;
};
QueuePolicy queue_policy(const DatabaseUrl& url, std::string_view schema, const std::string& queue);

/// Changes keys of `queue`'s policy (`oncely queue set`), the others kept: mode, lease,
/// max_attempts, job_timeout, backoff.base, backoff.cap, backoff.jitter, backoff.schedule
/// (durations as the configuration file writes them, "5s"; a schedule as "1s,5s,30s", or
/// "none" to remove it). The result is validated as the configuration file is (ConfigError
/// naming the key) before it is stored. Returns the policy stored.
QueueConfig set_queue_policy(const DatabaseUrl& url, std::string_view schema, const std::string& queue,
                             const std::vector<std::pair<std::string, std::string>>& changes);

}  // namespace oncely
