#pragma once
// Jobs as the operator sees them: list (keyset paging), group by error, show one, cancel.
// The CLI (`oncely jobs ...`) and any console call these same functions. Each opens a
// connection of its own and runs in a transaction of its own; errors: DatabaseError
// (unreachable, schema not migrated), ConfigError for a filter that cannot be meant.
//
// States (computed, never stored):
//   running    a worker holds it: a transaction-mode job named in the attempt record of a
//              registered worker, or a lease-mode job whose lease is live
//              (lease_token set and run_at, the lease's expiry, in the future)
//   ready      run_at has passed and no worker holds it
//   scheduled  run_at in the future, never attempted, not leased
//   retrying   run_at in the future after a failed attempt, not leased

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oncely/database_url.hpp"

namespace oncely {

enum class JobState { ready, scheduled, retrying, running };

/// "ready", "scheduled", "retrying", "running" -> the state; ConfigError otherwise.
JobState parse_job_state(std::string_view name);
[[nodiscard]] std::string_view to_string(JobState state);

/// Which jobs an operation selects; every criterion set must match.
struct JobFilter {
  std::vector<std::int64_t> ids;                        ///< job ids; empty: any
  std::optional<std::string> queue;                     ///< exact
  std::optional<std::string> kind;                      ///< exact
  std::optional<JobState> state;
  std::optional<std::string> error_text;                ///< case-insensitive substring of last_error
  std::optional<std::chrono::milliseconds> older_than;  ///< created before now() - this
  /// cancel: select every job when no criterion is set (a deliberate "all").
  bool all = false;

  [[nodiscard]] bool empty() const noexcept {
    return ids.empty() && !queue && !kind && !state && !error_text && !older_than;
  }
};

/// One job. Timestamps are ISO 8601 in UTC with microseconds.
struct JobSummary {
  std::int64_t id = 0;
  std::string queue;
  std::string kind;
  JobState state = JobState::ready;
  int priority = 0;
  int attempts = 0;
  std::optional<int> max_attempts;
  std::string run_at;     ///< when it runs next (for a live lease: when the lease expires)
  std::string created_at;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> unique_key;
  std::optional<std::string> last_error;
};

struct JobPage {
  std::vector<JobSummary> jobs;          ///< by id, ascending, at most the limit
  /// Pass as `after` for the next page; none: this was the last page.
  std::optional<std::int64_t> next_after;
};

/// The most jobs list_jobs returns in one page (and group_jobs_by_error in groups).
inline constexpr long kMaxJobsLimit = 10000;

/// Jobs with ids above `after` that match, by id. `limit` 1..kMaxJobsLimit.
JobPage list_jobs(const DatabaseUrl& url, std::string_view schema, const JobFilter& filter, long limit = 50,
                  std::optional<std::int64_t> after = std::nullopt);

/// Jobs grouped by last_error with every run of digits replaced by '#'.
struct JobErrorGroup {
  std::string error;  ///< "(none)" for jobs without an error
  long count = 0;
  std::int64_t example_id = 0;               ///< the newest job of the group
  std::optional<std::string> example_error;  ///< its last_error, verbatim
};
std::vector<JobErrorGroup> group_jobs_by_error(const DatabaseUrl& url, std::string_view schema,
                                               const JobFilter& filter, long limit = 50);

/// Everything about one job.
struct JobDetail {
  JobSummary summary;
  std::string payload_text;  ///< exactly as stored (jsonb's text); empty when payload_hidden
  bool payload_hidden = false;  ///< not read (show_job without with_payload)
  std::string errors_text;   ///< the per-attempt history, a JSON array: attempt, at, error, class
  std::optional<std::int64_t> origin_job_id;
  std::optional<std::int64_t> held_by_worker;  ///< a transaction-mode job: the worker running it
  std::optional<std::int64_t> lease_token;     ///< a lease-mode job that was claimed
  std::optional<std::int64_t> leased_by;       ///< the worker holding the lease
  bool lease_live = false;                     ///< the lease has not expired
};
/// Without `with_payload` the payload column is not read (nor named: a role without SELECT
/// on it can run this), and payload_hidden is set.
std::optional<JobDetail> show_job(const DatabaseUrl& url, std::string_view schema, std::int64_t id,
                                  bool with_payload = true);

/// What cancel_jobs() did (or, with dry_run, would do).
struct CancelResult {
  /// Moved to dead_letters with error_class "cancelled" (replayable as any dead letter),
  /// by job id; with dry_run, what would be.
  std::vector<std::int64_t> cancelled;
  /// Running inside a transaction-mode batch (its row is locked): left alone.
  std::vector<std::int64_t> running;
  /// Selected but gone before they could be locked (completed meanwhile).
  long gone = 0;
};

/// Cancels the selected jobs in one transaction: each one not locked by a worker's batch
/// moves to dead_letters (class "cancelled"), a lease-mode job whose lease is live included
/// (its worker's renewal finds the lease gone and stops the handler). A job locked by a
/// transaction-mode batch is left to finish and reported in `running`. With `dry_run`
/// nothing is locked or changed: `running` then holds the jobs running by the computed
/// state. Refuses an empty filter unless `filter.all` (ConfigError).
CancelResult cancel_jobs(const DatabaseUrl& url, std::string_view schema, const JobFilter& filter,
                         bool dry_run = false);

}  // namespace oncely
