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
#include "oncely/records.hpp"

namespace oncely {

/// The last `buckets` x `bucket_minutes` minutes of job_stats (the current minute the last
/// one's end), oldest first, every bucket present: the console's charts (an hour: 60 x 1,
/// a day: 96 x 15). `queue`: only that one. job_stats keeps a day. Throws DatabaseError,
/// ConfigError for buckets outside 1..1440 or minutes outside 1..1440.
std::vector<OutcomeBucket> outcome_history(const DatabaseUrl& url, std::string_view schema,
                                           const std::optional<std::string>& queue, int buckets, int bucket_minutes);

/// Reads the numbers in one snapshot. `queue`: only that queue. Throws DatabaseError.
Stats collect_stats(const DatabaseUrl& url, std::string_view schema, const std::optional<std::string>& queue = {});

/// What a queue's limits hold back now, as `stats`, `queue show` and the console print it
/// ("2 running, 38 held back, 2 key(s) at their limit"); empty for a queue without limits.
std::string held_by_limits_line(const QueueStats& queue);

/// Thresholds of `oncely check`; a threshold that is not set is not checked.
struct CheckThresholds {
  std::optional<long> dead_letters_warning;
  std::optional<long> dead_letters_critical = 10;     ///< alarm when the dead-letter queue holds more than 10
  std::optional<double> failure_rate_warning = 0.01;  ///< alarm when more than 1 % of attempts fail
  std::optional<double> failure_rate_critical;
  long failure_rate_min_attempts = 10;            ///< fewer attempts in 5 minutes: rate not judged
  std::optional<double> max_age_warning_s = 300;  ///< oldest ready job waiting longer
  std::optional<double> max_age_critical_s;
  std::optional<double> dead_letter_growth_warning;  ///< dead letters per minute (15-minute window)
  std::optional<double> dead_letter_growth_critical;
  std::optional<double> paused_warning_s = 3600;  ///< a queue paused for longer than an hour
};

enum class CheckStatus { ok = 0, warning = 1, critical = 2, unknown = 3 };

struct CheckFinding {
  CheckStatus status;
  std::string message;  ///< one line, e.g. "CRITICAL: queue payments has 12 dead letters (> 10)"
};

/// Judges `stats` against `thresholds`: one finding per threshold crossed, worst first.
std::vector<CheckFinding> check(const Stats& stats, const CheckThresholds& thresholds);

/// The same, each queue judged by its own thresholds (`thresholds_for(queue name)`).
std::vector<CheckFinding> check_per_queue(
    const Stats& stats, const std::function<CheckThresholds(const std::string& queue)>& thresholds_for);

/// A queue's configured alarms as check thresholds (the failure rates are percentages there).
CheckThresholds thresholds_of(const AlarmConfig& alarms);

}  // namespace oncely
