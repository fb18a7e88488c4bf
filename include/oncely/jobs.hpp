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
#include "oncely/records.hpp"

namespace oncely {

/// Jobs with ids above `after` that match, by id. `limit` 1..kMaxJobsLimit.
JobPage list_jobs(const DatabaseUrl& url, std::string_view schema, const JobFilter& filter, long limit = 50,
                  std::optional<std::int64_t> after = std::nullopt);

/// Jobs grouped by last_error with every run of digits replaced by '#', the largest first.
std::vector<JobErrorGroup> group_jobs_by_error(const DatabaseUrl& url, std::string_view schema, const JobFilter& filter,
                                               long limit = 50);

/// Without `with_payload` the payload column is not read (nor named: a role without SELECT
/// on it can run this), and payload_hidden is set.
std::optional<JobDetail> show_job(const DatabaseUrl& url, std::string_view schema, std::int64_t id,
                                  bool with_payload = true);

/// Completed jobs (their records, kept for the dedup window) that match, newest first:
/// ids below `before`. `limit` 1..kMaxJobsLimit. Without `with_output` the output column is
/// not read (nor named: the viewer role, which may not read it, can run this).
CompletedJobPage list_completed_jobs(const DatabaseUrl& url, std::string_view schema, const CompletedJobFilter& filter,
                                     long limit = 50, std::optional<std::int64_t> before = std::nullopt,
                                     bool with_output = false);

/// Cancels the selected jobs in one transaction: each one not locked by a worker's batch
/// moves to dead_letters (class "cancelled"), a lease-mode job whose lease is live included
/// (its worker's renewal finds the lease gone and stops the handler). A job locked by a
/// transaction-mode batch is left to finish and reported in `running`. With `dry_run`
/// nothing is locked or changed: `running` then holds the jobs running by the computed
/// state. Refuses an empty filter unless `filter.all` (ConfigError).
CancelResult cancel_jobs(const DatabaseUrl& url, std::string_view schema, const JobFilter& filter,
                         bool dry_run = false);

}  // namespace oncely
