// collect_stats() and check(): the operator's view of queue health, read from the database.

#include "oncely/stats.hpp"

#include "api/stats_reader.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "oncely/workers.hpp"
#include "store/store.hpp"
#include "support/db.hpp"
#include "support/duration.hpp"

namespace oncely {
namespace {

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %%", fraction * 100);
  return buffer;
}

std::string seconds_text(double s) {
  return detail::format_duration(std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000))));
}

}  // namespace

namespace detail {

Stats read_stats(pqxx::connection& conn, const Store& store, const std::optional<std::string>& queue) {
  std::map<std::string, QueueStats> by_queue;
  Stats stats;
  // One snapshot for every number (REPEATABLE READ, read only).
  pqxx::transaction<pqxx::isolation_level::repeatable_read, pqxx::readwrite_policy::read_only> tx(conn);
  store.jobs.read_depths(tx, queue, by_queue);
  store.job_stats.read_rates(tx, queue, by_queue);
  store.dead_letters.read_counts(tx, queue, by_queue);
  store.queue_pauses.read_pauses(tx, queue, by_queue);
  store.queue_policies.read_held_back(tx, queue, by_queue);
  stats.workers = store.workers.list(tx, queue);
  tx.commit();
  // A queue a worker serves is listed even while it has no jobs.
  for (const WorkerInfo& w : stats.workers) {
    for (const auto& name : w.queues) {
      if (!queue || *queue == name) queue_entry(by_queue, name);
    }
  }
  for (auto& [name, q] : by_queue) stats.queues.push_back(std::move(q));
  return stats;
}

}  // namespace detail

std::string held_by_limits_line(const QueueStats& queue) {
  if (!queue.held_by_limit) return "";
  return std::to_string(queue.running_under_limits.value_or(0)) + " running, " + std::to_string(*queue.held_by_limit) +
         " held back, " + std::to_string(queue.keys_at_limit.value_or(0)) + " key(s) at their limit";
}

Stats collect_stats(const DatabaseUrl& url, std::string_view schema, const std::optional<std::string>& queue) {
  const detail::Store store(schema);  // validates the schema name before connecting
  auto conn = detail::connect(url);
  try {
    return detail::read_stats(*conn, store, queue);
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("lost the connection while reading stats: " + detail::one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(url, schema, "reading stats from schema \"" + std::string(schema) + "\" failed", e);
  }
}

std::vector<WorkerInfo> list_workers(const DatabaseUrl& url, std::string_view schema) {
  const detail::Store store(schema);
  auto conn = detail::connect(url);
  try {
    pqxx::read_transaction tx(*conn);
    return store.workers.list(tx, std::nullopt);
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("lost the connection while reading workers: " + detail::one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(url, schema, "reading workers from schema \"" + std::string(schema) + "\" failed", e);
  }
}

std::vector<OutcomeBucket> outcome_history(const DatabaseUrl& url, std::string_view schema,
                                           const std::optional<std::string>& queue, int buckets, int bucket_minutes) {
  if (buckets < 1 || buckets > 1440) throw ConfigError("buckets", "must be between 1 and 1440");
  if (bucket_minutes < 1 || bucket_minutes > 1440) throw ConfigError("bucket minutes", "must be between 1 and 1440");
  const detail::Store store(schema);
  auto conn = detail::connect(url);
  try {
    pqxx::read_transaction tx(*conn);
    return store.job_stats.history(tx, queue, buckets, bucket_minutes);
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("lost the connection while reading job_stats: " + detail::one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(url, schema, "reading job_stats from schema \"" + std::string(schema) + "\" failed", e);
  }
}

std::vector<CheckFinding> check(const Stats& stats, const CheckThresholds& thresholds) {
  return check_per_queue(stats, [&](const std::string&) { return thresholds; });
}

CheckThresholds thresholds_of(const AlarmConfig& a) {
  CheckThresholds t;
  const auto seconds = [](const std::optional<std::chrono::milliseconds>& d) {
    return d ? std::optional<double>(static_cast<double>(d->count()) / 1000.0) : std::nullopt;
  };
  const auto fraction = [](const std::optional<double>& pct) {
    return pct ? std::optional<double>(*pct / 100) : std::nullopt;
  };
  t.dead_letters_warning = a.dead_letters_warning;
  t.dead_letters_critical = a.dead_letters_critical;
  t.failure_rate_warning = fraction(a.failure_rate_warning);
  t.failure_rate_critical = fraction(a.failure_rate_critical);
  t.failure_rate_min_attempts = a.failure_rate_min_attempts;
  t.max_age_warning_s = seconds(a.max_age_warning);
  t.max_age_critical_s = seconds(a.max_age_critical);
  t.dead_letter_growth_warning = a.dead_letter_growth_warning;
  t.dead_letter_growth_critical = a.dead_letter_growth_critical;
  return t;
}

std::vector<CheckFinding> check_per_queue(
    const Stats& stats, const std::function<CheckThresholds(const std::string& queue)>& thresholds_for) {
  std::vector<CheckFinding> findings;
  const auto judge = [&](double value, const std::optional<double>& warning, const std::optional<double>& critical,
                         const std::string& what, const std::string& value_text, const auto& threshold_text) {
    if (critical && value > *critical) {
      findings.push_back(
          {CheckStatus::critical, "CRITICAL: " + what + " " + value_text + " (> " + threshold_text(*critical) + ")"});
    } else if (warning && value > *warning) {
      findings.push_back(
          {CheckStatus::warning, "WARNING: " + what + " " + value_text + " (> " + threshold_text(*warning) + ")"});
    }
  };
  const auto count_text = [](double v) { return std::to_string(std::llround(v)); };
  const auto as_optional_double = [](const std::optional<long>& v) {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  for (const QueueStats& q : stats.queues) {
    const CheckThresholds t = thresholds_for(q.queue);
    const std::string queue = "queue " + q.queue;
    judge(static_cast<double>(q.dead_letters), as_optional_double(t.dead_letters_warning),
          as_optional_double(t.dead_letters_critical), queue + " has", std::to_string(q.dead_letters) + " dead letters",
          count_text);
    if (q.failure_rate_5m && q.attempts_5m >= t.failure_rate_min_attempts) {
      judge(*q.failure_rate_5m, t.failure_rate_warning, t.failure_rate_critical, queue + " failure rate",
            percent(*q.failure_rate_5m) + " over the last 5 minutes", percent);
    }
    if (q.oldest_ready_age_s) {
      judge(*q.oldest_ready_age_s, t.max_age_warning_s, t.max_age_critical_s, queue + " oldest ready job has waited",
            seconds_text(*q.oldest_ready_age_s), seconds_text);
    }
    const auto per_minute = [](double v) {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.2f/min", v);
      return std::string(buffer);
    };
    if (q.paused && q.paused_for_s && t.paused_warning_s && *q.paused_for_s > *t.paused_warning_s) {
      findings.push_back({CheckStatus::warning, "WARNING: " + queue + " has been paused for " +
                                                    seconds_text(*q.paused_for_s) + " (> " +
                                                    seconds_text(*t.paused_warning_s) + ")" +
                                                    (q.pause_reason ? ": " + *q.pause_reason : std::string())});
    }
    judge(q.dead_letters_per_minute_15m, t.dead_letter_growth_warning, t.dead_letter_growth_critical,
          queue + " dead letters growing at", per_minute(q.dead_letters_per_minute_15m) + " over 15 minutes",
          per_minute);
  }
  std::stable_sort(findings.begin(), findings.end(),
                   [](const CheckFinding& a, const CheckFinding& b) { return a.status > b.status; });
  return findings;
}

}  // namespace oncely
