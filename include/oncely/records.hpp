#pragma once
// The read models: plain values that the store's statements fill and the API functions
// (stats.hpp, jobs.hpp, queues.hpp, workers.hpp) return. A leaf: no I/O, nothing here
// opens a connection, so the store can build them without including the API's headers.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oncely/config.hpp"

namespace oncely {

// ---- stats.hpp: queue health ----

/// Outcomes per minute over a window of N clock minutes (the current minute and the
/// N-1 before it), i.e. the count in the window divided by N.
struct OutcomeRates {
  double completed = 0;
  double retried = 0;  ///< failed attempts that will run again
  double dead_lettered = 0;
  double deduplicated = 0;
  double crashed = 0;  ///< attempts found unfinished (their worker died)
};

struct QueueStats {
  std::string queue;
  long depth = 0;                            ///< jobs in the table
  long ready = 0;                            ///< run_at has passed and no worker holds it
  long scheduled = 0;                        ///< run_at in the future, never attempted, not waiting
  long waiting = 0;                          ///< waiting for parents (depends_on) to complete
  long retrying = 0;                         ///< run_at in the future after a failed attempt
  long in_flight = 0;                        ///< being run by a registered worker right now
  std::optional<double> oldest_ready_age_s;  ///< how long the oldest ready job has waited
  OutcomeRates per_minute_1m, per_minute_5m, per_minute_15m;
  long attempts_5m = 0;                    ///< completed + retried + dead-lettered, last 5 minutes
  std::optional<double> failure_rate_5m;   ///< (retried + dead-lettered) / attempts_5m
  std::optional<double> mean_run_ms_5m;    ///< handler time of completed jobs
  long dead_letters = 0;                   ///< not replayed
  double dead_letters_per_minute_15m = 0;  ///< dead-letter growth
  bool paused = false;                     ///< `oncely queue pause`: workers claim nothing from it
  std::optional<double> paused_for_s;      ///< since when, while paused
  std::optional<std::string> pause_reason;
  // A queue with limits across workers (docs/configuration.md, "Limits across workers"):
  std::optional<long> running_under_limits;  ///< jobs holding a slot of its limits now
  std::optional<long> held_by_limit;         ///< ready jobs its limits keep waiting now
  std::optional<long> keys_at_limit;         ///< keys at their per-key concurrency or rate
};

struct WorkerInfo {
  long id = 0;
  std::string host;
  int pid = 0;
  std::vector<std::string> queues;
  std::string started_at;
  double heartbeat_age_s = 0;
  int jobs_in_flight = 0;
};

struct Stats {
  std::vector<QueueStats> queues;  ///< every queue with jobs, recent outcomes, dead letters or workers
  std::vector<WorkerInfo> workers;
};

/// Outcomes in one bucket of time (counts, not rates).
struct OutcomeBucket {
  std::string start;  ///< ISO 8601 UTC: the bucket's first minute
  long completed = 0;
  long retried = 0;
  long dead_lettered = 0;
  long deduplicated = 0;
  long crashed = 0;
};

// ---- jobs.hpp: jobs as the operator sees them (states: see jobs.hpp) ----

enum class JobState { ready, scheduled, retrying, running, waiting };

/// "ready", "scheduled", "retrying", "running", "waiting" -> the state; ConfigError otherwise.
JobState parse_job_state(std::string_view name);
[[nodiscard]] std::string_view to_string(JobState state);

/// Which jobs an operation selects; every criterion set must match.
struct JobFilter {
  std::vector<std::int64_t> ids;     ///< job ids; empty: any
  std::optional<std::string> queue;  ///< exact
  std::optional<std::string> kind;   ///< exact
  std::optional<JobState> state;
  std::optional<std::string> error_text;                ///< case-insensitive substring of last_error
  std::optional<std::chrono::milliseconds> older_than;  ///< created before now() - this
  std::optional<std::int64_t> batch_id;                 ///< members of this batch
  /// cancel: select every job when no criterion is set (a deliberate "all").
  bool all = false;

  [[nodiscard]] bool empty() const noexcept {
    return ids.empty() && !queue && !kind && !state && !error_text && !older_than && !batch_id;
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
  std::string run_at;  ///< when it runs next (for a live lease: when the lease expires; waiting: once released)
  std::string created_at;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> unique_key;
  std::optional<std::string> last_error;
  std::vector<std::int64_t> waiting_for;  ///< waiting: the parents that have not completed yet
  std::optional<std::int64_t> batch_id;   ///< the batch it is a member of
};

struct JobPage {
  std::vector<JobSummary> jobs;  ///< by id, ascending, at most the limit
  /// Pass as `after` for the next page; none: this was the last page.
  std::optional<std::int64_t> next_after;
};

/// The most jobs list_jobs returns in one page (and group_jobs_by_error in groups).
inline constexpr long kMaxJobsLimit = 10000;

/// Jobs grouped by last_error with every run of digits replaced by '#'.
struct JobErrorGroup {
  std::string error;  ///< "(none)" for jobs without an error
  long count = 0;
  std::int64_t example_id = 0;               ///< the newest job of the group
  std::optional<std::string> example_error;  ///< its last_error, verbatim
};

/// Everything about one job.
struct JobDetail {
  JobSummary summary;
  std::string payload_text;     ///< exactly as stored (jsonb's text); empty when payload_hidden
  bool payload_hidden = false;  ///< not read (show_job without with_payload)
  std::string errors_text;      ///< the per-attempt history, a JSON array: attempt, at, error, class
  std::optional<std::int64_t> origin_job_id;
  std::optional<std::int64_t> held_by_worker;  ///< a transaction-mode job: the worker running it
  std::optional<std::int64_t> lease_token;     ///< a lease-mode job that was claimed
  std::optional<std::int64_t> leased_by;       ///< the worker holding the lease
  bool lease_live = false;                     ///< the lease has not expired
};

/// A completed job's record (schema 27), kept for the dedup window: its dedup marker.
/// A record written before schema 27 has only the job, its key and when it was marked.
struct CompletedJob {
  std::int64_t id = 0;  ///< the job's id
  std::string queue;
  std::string kind;
  std::optional<std::string> idempotency_key;
  std::string completed_at;                ///< ISO 8601 UTC (before schema 27: when its marker was written)
  std::optional<int> attempt;              ///< the attempt that completed it, 1 for the first
  std::optional<double> run_time_ms;       ///< its handler's run time
  std::optional<std::string> worker;       ///< "host:pid" of a C++ worker, or a protocol worker's name
  std::optional<std::string> trace_id;     ///< the attempt's W3C trace id
  std::optional<std::string> output_text;  ///< the handler's output, JSON text as stored
  bool output_hidden = false;              ///< not read (list_completed_jobs without with_output)
};

/// Which completed jobs: every criterion set must hold.
struct CompletedJobFilter {
  std::optional<std::int64_t> id;              ///< the job's id
  std::optional<std::string> queue;            ///< exact
  std::optional<std::string> kind;             ///< exact
  std::optional<std::string> idempotency_key;  ///< exact, of any kind
};

struct CompletedJobPage {
  std::vector<CompletedJob> jobs;  ///< newest (highest id) first, at most the limit
  /// Pass as `before` for the next page; none: this was the last page.
  std::optional<std::int64_t> next_before;
};

/// What cancel_jobs() did (or, with dry_run, would do).
struct CancelResult {
  /// Moved to dead_letters with error_class "cancelled" (replayable as any dead letter),
  /// by job id; with dry_run, what would be.
  std::vector<std::int64_t> cancelled;
  /// Running inside a transaction-mode batch (its row is locked): left alone.
  std::vector<std::int64_t> running;
  /// Selected but gone before they could be locked (completed meanwhile).
  long gone = 0;
  /// Jobs waiting for a cancelled one (docs/dependencies.md), cancelled with it; with
  /// dry_run, what would be.
  std::vector<std::int64_t> descendants;
};

// ---- queues.hpp: queue control ----

struct QueuePause {
  std::string queue;
  std::string paused_at;    ///< ISO 8601, UTC
  double paused_for_s = 0;  ///< how long it has been paused
  std::optional<std::string> reason;
  std::string paused_by;  ///< "current_user (application_name)" of the session that paused it
};

/// What pause_queue() did: the pause that holds, and whether this call started it (a
/// queue already paused keeps its first pause).
struct PauseResult {
  QueuePause pause;
  bool newly = false;
};

/// One queue as `oncely queue list` shows it.
struct QueueInfo {
  std::string queue;
  bool has_jobs = false;            ///< it has rows in jobs
  bool configured = false;          ///< named in `configured` (a worker configuration)
  bool served = false;              ///< a registered worker serves it
  std::optional<QueuePause> pause;  ///< set while paused
  /// The policy every worker of the queue applies: its queue_policies row, or the defaults
  /// when it has none. Only the policy's fields mean anything here (mode, lease,
  /// max_attempts, backoff, job_timeout; support/queue_policy's policy_json writes them).
  QueueConfig policy;
  bool policy_stored = false;  ///< it has a queue_policies row (so it is known from it)
};

}  // namespace oncely
