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

#include "oncely/database_url.hpp"
#include "oncely/records.hpp"

namespace oncely {

/// Pauses `queue` (the queue need not have jobs yet). Pausing a paused queue keeps its
/// first pause (time, reason, who) and returns it; `newly` says which happened.
PauseResult pause_queue(const DatabaseUrl& url, std::string_view schema, const std::string& queue,
                        const std::optional<std::string>& reason = std::nullopt);

/// Resumes `queue`; returns the pause it ended, or nothing when it was not paused.
std::optional<QueuePause> resume_queue(const DatabaseUrl& url, std::string_view schema, const std::string& queue);

/// Every queue known from jobs, from `configured`, from registered workers or from
/// pauses, by name.
std::vector<QueueInfo> list_queues(const DatabaseUrl& url, std::string_view schema,
                                   const std::vector<std::string>& configured = {});

}  // namespace oncely
