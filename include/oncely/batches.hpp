#pragma once
// Batches: a group of jobs whose callback jobs are enqueued once, when the group is closed and
// its last member has completed or been dead-lettered (docs/dependencies.md). Open one with
// Client::open_batch() (or SQL open_batch(), `oncely batches open`), enqueue its members
// with NewJob::batch_id, then close it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "oncely/database_url.hpp"

namespace oncely {

/// The jobs a batch enqueues when it finishes, each a job description:
/// {"kind": "...", "payload": {...}, "queue": "...", "key": "...", "priority": N, "max_attempts": N}
/// (kind required; payload an object, to which batch_id, completed and dead are added; key
/// defaults to "oncely-batch-<id>-<callback>"). Unset: no such callback.
struct BatchCallbacks {
  std::optional<nlohmann::json> on_success{};  ///< when no member was dead-lettered
  std::optional<nlohmann::json> on_failure{};  ///< when at least one was
  std::optional<nlohmann::json> on_finish{};   ///< either way
  /// The same as JSON text, sent as it is, so that every number of a payload keeps its digits
  /// (as NewJob::payload_json); checked first (ConfigError); wins over the field above.
  std::optional<std::string> on_success_json{}, on_failure_json{}, on_finish_json{};
};

struct BatchStatus {
  std::int64_t id = 0;
  std::int64_t total = 0;      ///< members enqueued
  std::int64_t completed = 0;  ///< members completed
  std::int64_t dead = 0;       ///< members dead-lettered (failed, cancelled or dependency_failed)
  std::int64_t waiting = 0;    ///< members still waiting for their parents
  std::string created_at;      ///< ISO 8601 UTC
  std::string created_by;      ///< the database role that opened it
  std::optional<std::string> closed_at{};
  std::optional<std::string> finished_at{};  ///< when its callbacks were enqueued
  std::vector<std::int64_t> callback_job_ids{};
  /// The callbacks' descriptions, JSON text: read by find_batch() only, and only for a role that
  /// may read payloads (they hold one; the viewer role may not). callbacks_read says whether they were.
  std::optional<std::string> on_success{}, on_failure{}, on_finish{};
  bool callbacks_read = false;

  /// Members not settled yet (queued, running or waiting).
  [[nodiscard]] std::int64_t pending() const noexcept { return total - completed - dead; }
  /// "open", "closed" (no more members; some pending) or "finished".
  [[nodiscard]] std::string_view state() const noexcept {
    return finished_at ? "finished" : closed_at ? "closed" : "open";
  }
};

struct ListBatchesOptions {
  bool unfinished = false;                  ///< open and closed ones only
  int limit = 50;                           ///< 1..1000
  std::optional<std::int64_t> before_id{};  ///< keyset paging: ids below this one
};

/// Newest first, without the callbacks' descriptions. Throws DatabaseError, ConfigError (schema name, limit).
std::vector<BatchStatus> list_batches(const DatabaseUrl& url, std::string_view schema,
                                      const ListBatchesOptions& options = {});
/// One batch; none when there is no such batch. With `callbacks`, their descriptions too, when
/// the role may read them.
std::optional<BatchStatus> find_batch(const DatabaseUrl& url, std::string_view schema, std::int64_t id,
                                      bool callbacks = true);

}  // namespace oncely
