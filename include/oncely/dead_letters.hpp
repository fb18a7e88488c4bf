#pragma once
// Dead letters: list, group, show, replay and purge the jobs that gave up.
//
// Every function comes in two forms: one that opens its own connection from a DatabaseUrl
// and runs in a transaction of its own, and one that runs inside the caller's transaction
// (the caller commits). All of them select rows with a DeadLetterFilter; replay and purge
// refuse an empty filter unless `all` is set, so that "everything" is always said out loud.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <pqxx/transaction_base>

#include "oncely/database_url.hpp"

namespace oncely {

/// Which dead letters an operation selects. Every criterion that is set must match; an
/// unset criterion matches everything.
struct DeadLetterFilter {
  std::vector<std::int64_t> ids;  ///< dead-letter ids (not job ids); empty: any
  /// job ids, as logs print them: the job that failed, or the job a replay enqueued; empty: any
  std::vector<std::int64_t> job_ids;
  std::optional<std::string> queue;        ///< source queue, exact
  std::optional<std::string> kind;         ///< job kind, exact
  std::optional<std::string> error_class;  ///< "permanent", "exhausted", "unknown_kind", ...
  std::optional<std::string> error_text;   ///< case-insensitive substring of last_error
  /// last_error with every run of digits replaced by '#' equals this ("(none)": no
  /// last_error): one group of group_dead_letters(..., DeadLetterGrouping::error).
  std::optional<std::string> error_pattern;
  std::optional<std::string> idempotency_key;           ///< exact
  std::optional<std::chrono::milliseconds> older_than;  ///< failed_at before now() - this
  std::optional<std::chrono::milliseconds> newer_than;  ///< failed_at at or after now() - this
  /// list/group: also select dead letters already replayed (by default only those not yet
  /// replayed). replay never replays one twice; purge ignores this and deletes replayed and
  /// unreplayed alike.
  bool include_replayed = false;
  /// replay/purge: select every dead letter when no criterion is set (a deliberate "all").
  bool all = false;

  /// True when no criterion is set (include_replayed and all are not criteria).
  [[nodiscard]] bool empty() const noexcept {
    return ids.empty() && job_ids.empty() && !queue && !kind && !error_class && !error_text && !error_pattern &&
           !idempotency_key && !older_than && !newer_than;
  }
};

/// One row of dead_letters. Timestamps are ISO 8601 in UTC with microseconds
/// ("2025-03-01T09:30:00.123456Z"). payload, errors and error_detail are filled only when
/// details were asked for (show); otherwise they are null.
struct DeadLetter {
  std::int64_t id = 0;
  std::int64_t job_id = 0;  ///< the original job's id
  std::string queue;        ///< the source queue
  std::string kind;
  /// The payload as nlohmann reads it: a number beyond a double's precision is rounded,
  /// and one beyond its range (1e400) leaves it null. payload_text is exact.
  nlohmann::json payload;
  /// The payload as the database holds it (jsonb's text: every number as stored).
  std::string payload_text;
  std::optional<std::string> idempotency_key;
  int priority = 0;
  int attempts = 0;
  std::optional<int> max_attempts;
  std::optional<std::string> last_error;
  std::string error_class;
  nlohmann::json errors;        ///< per-attempt history: attempt, at, error, class
  nlohmann::json error_detail;  ///< exception type, stderr tail, HTTP status...
  std::string created_at;       ///< when the original job was enqueued
  std::string failed_at;
  std::optional<std::string> replayed_at;
  std::optional<std::int64_t> replayed_job_id;
  /// A dedup marker exists for (kind, idempotency_key): a job with this key was processed
  /// after this one failed (by another copy or by a replay), so replaying it again would
  /// be skipped as a duplicate. Always false without a key.
  bool key_processed = false;
};

struct DeadLetterList {
  std::vector<DeadLetter> dead_letters;  ///< newest failure first, at most the limit
  long total = 0;                        ///< how many match the filter, ignoring the limit
};

enum class DeadLetterGrouping {
  error,        ///< last_error with every run of digits replaced by '#' ("the same error")
  error_class,  ///< error_class
  kind,
  queue,
};

/// "error", "class", "kind", "queue" -> the grouping; throws ConfigError for anything else.
DeadLetterGrouping parse_dead_letter_grouping(std::string_view name);
[[nodiscard]] std::string_view to_string(DeadLetterGrouping grouping);

struct DeadLetterGroup {
  std::string key;  ///< the grouped value ("(none)" for a missing last_error)
  long count = 0;
  std::string first_failed_at;
  std::string last_failed_at;
  std::int64_t example_id = 0;               ///< the newest dead letter of the group
  std::optional<std::string> example_error;  ///< that dead letter's last_error, verbatim
};

struct DeadLetterGroups {
  std::vector<DeadLetterGroup> groups;  ///< most frequent first, at most the limit
  long total_groups = 0;                ///< groups before the limit
};

/// Where a page of dead letters ended: the last row's failed_at and id (the order's key).
struct DeadLetterCursor {
  std::string failed_at;  ///< ISO 8601 UTC with microseconds, as DeadLetter::failed_at
  std::int64_t id = 0;
};

struct DeadLetterPageOptions {
  long limit = 50;                        ///< 1..10000
  std::optional<DeadLetterCursor> after;  ///< the previous page's `next`; none: the first page
  bool details = false;                   ///< also load errors and error_detail
  /// Also load the payload. Without it the statement does not name the payload column, so
  /// a role without SELECT on it (the viewer's) can read every other column.
  bool payload = false;
};

struct DeadLetterPage {
  std::vector<DeadLetter> dead_letters;  ///< newest failure first, at most the limit
  std::optional<DeadLetterCursor> next;  ///< pass as `after` for the next page; none: the last
};

/// A dead letter replayed as a new job.
struct ReplayedDeadLetter {
  std::int64_t dead_letter_id = 0;
  std::int64_t job_id = 0;  ///< the new job
  std::string queue;        ///< the queue it was enqueued to
  std::string kind;
  std::optional<std::string> idempotency_key;
  /// A dedup marker for (kind, key) already exists, so the new job will be skipped as a
  /// duplicate when claimed: the key was processed successfully since the dead letter failed.
  bool key_processed = false;
};

struct ReplayResult {
  std::vector<ReplayedDeadLetter> replayed;  ///< by dead-letter id
  /// Dead letters the filter selected that were already replayed (before, or concurrently
  /// by someone else): skipped, not enqueued again.
  long already_replayed = 0;
  /// The first of those (at most 20): dead-letter id and the job it was replayed as.
  std::vector<std::pair<std::int64_t, std::int64_t>> already_replayed_sample;
};

// ---- on a connection of their own (throw DatabaseError for database failures, ConfigError
// ---- for a bad filter or schema name) ----

/// The selected dead letters, newest failure first. `limit` 0 means no limit. `details`
/// also loads payload, errors and error_detail.
DeadLetterList list_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter,
                                 long limit = 50, bool details = false);

/// The selected dead letters grouped, most frequent first. `limit` 0 means no limit.
DeadLetterGroups group_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter,
                                    DeadLetterGrouping by, long limit = 50);

/// Re-enqueues every selected dead letter that has not been replayed yet, atomically: each
/// becomes a new job (attempts 0, run now) with the same kind, payload, idempotency key,
/// priority and max_attempts, in its own queue or in `to_queue`, and is marked
/// replayed_at = now(), replayed_job_id = the new job, all in one statement. Replaying a
/// dead letter twice, even from two connections at once, enqueues it once.
/// Throws ConfigError when the filter is empty and not `all`, or `to_queue` is empty.
ReplayResult replay_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter,
                                 const std::optional<std::string>& to_queue = std::nullopt);

/// Deletes the selected dead letters, replayed or not; returns how many. Throws ConfigError
/// when the filter is empty and not `all`.
long purge_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter);

/// A page of the selected dead letters by keyset (newest failure first): as fast deep in a
/// long list as at its start. Counts nothing.
DeadLetterPage page_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter,
                                 const DeadLetterPageOptions& options);

/// How many dead letters the filter selects (include_replayed as set): the dry run of a
/// replay (include_replayed false) or of a purge (true).
long count_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter);

/// One dead letter whole (errors, error_detail; the payload only when `with_payload`),
/// replayed or not; nothing when there is no such id.
std::optional<DeadLetter> show_dead_letter(const DatabaseUrl& url, std::string_view schema, std::int64_t id,
                                           bool with_payload);

/// A replay or purge that goes ahead only if the filter still selects the number of dead
/// letters the operator was shown (`expected`, the dry run's count): counted and done in
/// one transaction. When the count differs nothing is done and `done` is false.
struct ConfirmedReplay {
  long selected = 0;  ///< what the filter selected when confirmed
  bool done = false;
  ReplayResult result;
};
ConfirmedReplay replay_dead_letters_confirmed(const DatabaseUrl& url, std::string_view schema,
                                              const DeadLetterFilter& filter, long expected);
struct ConfirmedPurge {
  long selected = 0;
  bool done = false;
  long purged = 0;
};
ConfirmedPurge purge_dead_letters_confirmed(const DatabaseUrl& url, std::string_view schema,
                                            const DeadLetterFilter& filter, long expected);

/// Whether the connection's role may read the payload columns of jobs and dead_letters,
/// and the outputs of completed jobs (a viewer role may not: its column privileges leave
/// them out, migrations/roles/roles.sql). Throws DatabaseError.
struct PayloadAccess {
  bool jobs = false;
  bool dead_letters = false;
  bool outputs = false;
};
PayloadAccess payload_access(const DatabaseUrl& url, std::string_view schema);

// ---- inside the caller's transaction (pqxx exceptions propagate) ----

DeadLetterList list_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter,
                                 long limit = 50, bool details = false);
DeadLetterGroups group_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter,
                                    DeadLetterGrouping by, long limit = 50);
/// Holds the selected dead letters' row locks until `tx` ends; a concurrent replay of the
/// same dead letters waits for it and then skips them.
ReplayResult replay_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter,
                                 const std::optional<std::string>& to_queue = std::nullopt);
long purge_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter);
DeadLetterPage page_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter,
                                 const DeadLetterPageOptions& options);

}  // namespace oncely
