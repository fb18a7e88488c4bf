#pragma once
// The rules a new job must satisfy before any statement is sent: pure, without a database,
// so that the API, the store, the CLI and the NDJSON line parser (and its fuzz target,
// tests/fuzz) check a job the same way and none of them needs the store's SQL for it.

#include <cstddef>
#include <string>
#include <string_view>

#include "oncely/values.hpp"

namespace oncely::detail {

/// Bounds on what a jobs row may hold (CHECK constraints of migration 0005): the claim puts
/// (kind, idempotency_key) into one btree entry and the claim index holds the queue name.
inline constexpr std::size_t kMaxQueueBytes = 128;
inline constexpr std::size_t kMaxKindBytes = 255;
inline constexpr std::size_t kMaxIdempotencyKeyBytes = 1024;
inline constexpr std::size_t kMaxParents = 10000;  // migration 0024's jobs_depends_on_size

/// Throws ConfigError when `job` cannot be a valid row (empty kind or queue, empty key,
/// names and keys over their bounds, priority outside smallint, max_attempts < 1, a
/// payload_json that is not JSON jsonb can store).
void validate_new_job(const NewJob& job);
/// The same without the check of payload_json (for callers that produced it themselves).
void validate_job_fields(const NewJob& job);

/// The payload's JSON text as it is sent: payload_json as given, else `payload` serialised
/// (with every non-ASCII character escaped when `ascii`).
[[nodiscard]] std::string payload_text(const NewJob& job, bool ascii = false);

/// "skip", "replace", "error" -> OnConflict; ConfigError(path, ...) otherwise.
OnConflict parse_on_conflict(std::string_view text, const char* path);

/// InvalidArgument for a unique_key that cannot be one (empty, over 1024 bytes).
void validate_unique_key(const NewJob& job);

}  // namespace oncely::detail
