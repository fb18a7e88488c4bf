#pragma once
// Queue health from the database alone: what `oncely stats` prints and `oncely check`
// judges. Rates come from job_stats, which every worker writes inside its own batch
// transactions, so they cover the whole cluster without scraping any process.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oncely/config.hpp"
#include "oncely/database_url.hpp"

namespace oncely {

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
  long depth = 0;      ///< jobs in the table
  long ready = 0;      ///< run_at has passed and no worker holds it
  long scheduled = 0;  ///< run_at in the future, never attempted
  long retrying = 0;   ///< run_at in the future after a failed attempt
  long in_flight = 0;  ///< being run by a registered worker right now
  std::optional<double> oldest_ready_age_s;  ///< how long the oldest ready job has waited
  OutcomeRates per_minute_1m, per_minute_5m, per_minute_15m;
  long attempts_5m = 0;                      ///< completed + retried + dead-lettered, last 5 minutes
  std::optional<double> failure_rate_5m;     ///< (retried + dead-lettered) / attempts_5m
  std::optional<double> mean_run_ms_5m;      ///< handler time of completed jobs
  long dead_letters = 0;                     ///< not replayed
  double dead_letters_per_minute_15m = 0;    ///< dead-letter growth
  bool paused = false;                       ///< `oncely queue pause`: workers claim nothing from it
  std::optional<double> paused_for_s;        ///< since when, while paused
  std::optional<std::string> pause_reason;
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

/// The last `buckets` x `bucket_minutes` minutes of job_stats (the current minute the last
/// one's end), oldest first, every bucket present: the console's charts (an hour: 60 x 1,
/// a day: 96 x 15). `queue`: only that one. job_stats keeps a day. Throws DatabaseError,
/// ConfigError for buckets outside 1..1440 or minutes outside 1..1440.
std::vector<OutcomeBucket> outcome_history(const DatabaseUrl& url, std::string_view schema,
                                           const std::optional<std::string>& queue, int buckets, int bucket_minutes);

/// Reads the numbers in one snapshot. `queue`: only that queue. Throws DatabaseError.
Stats collect_stats(const DatabaseUrl& url, std::string_view schema, const std::optional<std::string>& queue = {});

/// Thresholds of `oncely check`; a threshold that is not set is not checked.
struct CheckThresholds {
  std::optional<long> dead_letters_warning;
  std::optional<long> dead_letters_critical = 10;      ///< alarm when the dead-letter queue holds more than 10
  std::optional<double> failure_rate_warning = 0.01;   ///< alarm when more than 1 % of attempts fail
  std::optional<double> failure_rate_critical;
  long failure_rate_min_attempts = 10;                 ///< fewer attempts in 5 minutes: rate not judged
  std::optional<double> max_age_warning_s = 300;       ///< oldest ready job waiting longer
  std::optional<double> max_age_critical_s;
  std::optional<double> dead_letter_growth_warning;    ///< dead letters per minute (15-minute window)
  std::optional<double> dead_letter_growth_critical;
  std::optional<double> paused_warning_s = 3600;       ///< a queue paused for longer than an hour
};

enum class CheckStatus { ok = 0, warning = 1, critical = 2, unknown = 3 };

struct CheckFinding {
  CheckStatus status;
  std::string message;  ///< one line, e.g. "CRITICAL: queue payments has 12 dead letters (> 10)"
};

/// Judges `stats` against `thresholds`: one finding per threshold crossed, worst first.
std::vector<CheckFinding> check(const Stats& stats, const CheckThresholds& thresholds);

/// The same, each queue judged by its own thresholds (`thresholds_for(queue name)`).
std::vector<CheckFinding> check_per_queue(const Stats& stats,
                                          const std::function<CheckThresholds(const std::string& queue)>& thresholds_for);

/// A queue's configured alarms as check thresholds (the failure rates are percentages there).
CheckThresholds thresholds_of(const AlarmConfig& alarms);

}  // namespace oncely
