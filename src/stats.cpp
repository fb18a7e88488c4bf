// collect_stats() and check(): the operator's view of queue health, read from the database.

#include "oncely/stats.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "db.hpp"
#include "duration.hpp"
#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "schema.hpp"

namespace oncely {
namespace {

// Jobs per queue. "ready" excludes jobs that registered workers hold right now.
constexpr std::string_view kJobCounts = R"sql(
  WITH held AS (
    SELECT DISTINCT unnest(f.job_ids) AS id
      FROM :ONCELY_SCHEMA.attempts_in_flight f
      JOIN :ONCELY_SCHEMA.workers w ON w.id = f.worker_id
  )
  SELECT j.queue,
         count(*),
         count(*) FILTER (WHERE j.run_at <= now() AND h.id IS NULL),
         count(*) FILTER (WHERE j.run_at > now() AND j.attempts = 0),
         count(*) FILTER (WHERE j.run_at > now() AND j.attempts > 0),
         count(h.id),
         extract(epoch FROM now() - min(j.run_at) FILTER (WHERE j.run_at <= now() AND h.id IS NULL))::float8
    FROM :ONCELY_SCHEMA.jobs j LEFT JOIN held h ON h.id = j.id
   WHERE $1::text IS NULL OR j.queue = $1
   GROUP BY j.queue
)sql";

// Outcome counts per queue over windows of 1, 5 and 15 clock minutes (current included).
constexpr std::string_view kOutcomeCounts = R"sql(
  SELECT queue, w.minutes,
         sum(completed)::float8, sum(retried)::float8, sum(dead_lettered)::float8,
         sum(deduplicated)::float8, sum(crashed)::float8, sum(run_time_us)::float8
    FROM :ONCELY_SCHEMA.job_stats s
    CROSS JOIN (VALUES (1), (5), (15)) AS w(minutes)
   WHERE s.minute >= date_trunc('minute', now()) - (w.minutes - 1) * interval '1 minute'
     AND ($1::text IS NULL OR s.queue = $1)
   GROUP BY queue, w.minutes
)sql";

constexpr std::string_view kDeadLetterCounts = R"sql(
  SELECT queue,
         count(*) FILTER (WHERE replayed_at IS NULL),
         (count(*) FILTER (WHERE failed_at >= now() - interval '15 minutes'))::float8 / 15
    FROM :ONCELY_SCHEMA.dead_letters
   WHERE $1::text IS NULL OR queue = $1
   GROUP BY queue
)sql";

constexpr std::string_view kWorkers = R"sql(
  SELECT id, host, pid, array_to_json(queues)::text, to_char(started_at, 'YYYY-MM-DD"T"HH24:MI:SSOF'),
         extract(epoch FROM now() - heartbeat_at)::float8, jobs_in_flight
    FROM :ONCELY_SCHEMA.workers
   WHERE $1::text IS NULL OR $1 = ANY (queues)
   ORDER BY id
)sql";

template <typename T>
std::optional<T> nullable(const pqxx::field& f) {
  return f.is_null() ? std::nullopt : std::optional<T>(f.as<T>());
}

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %%", fraction * 100);
  return buffer;
}

std::string seconds_text(double s) {
  return detail::format_duration(std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000))));
}

}  // namespace

Stats collect_stats(const DatabaseUrl& url, std::string_view schema, const std::optional<std::string>& queue) {
  validate_schema_name(schema);
  const auto render = [&](std::string_view sql) { return detail::render_sql(sql, schema); };
  auto conn = detail::connect(url);
  Stats stats;
  std::map<std::string, QueueStats> by_queue;
  const auto at = [&](const std::string& name) -> QueueStats& {
    QueueStats& q = by_queue[name];
    q.queue = name;
    return q;
  };
  try {
    // One snapshot for every number (REPEATABLE READ, read only).
    pqxx::transaction<pqxx::isolation_level::repeatable_read, pqxx::readwrite_policy::read_only> tx(*conn);
    for (const auto& r : tx.exec_params(render(kJobCounts), queue)) {
      QueueStats& q = at(r[0].as<std::string>());
      q.depth = r[1].as<long>();
      q.ready = r[2].as<long>();
      q.scheduled = r[3].as<long>();
      q.retrying = r[4].as<long>();
      q.in_flight = r[5].as<long>();
      q.oldest_ready_age_s = nullable<double>(r[6]);
    }
    std::map<std::string, double> run_us_5m;
    for (const auto& r : tx.exec_params(render(kOutcomeCounts), queue)) {
      QueueStats& q = at(r[0].as<std::string>());
      const int minutes = r[1].as<int>();
      OutcomeRates rates{r[2].as<double>() / minutes, r[3].as<double>() / minutes, r[4].as<double>() / minutes,
                         r[5].as<double>() / minutes, r[6].as<double>() / minutes};
      if (minutes == 1) q.per_minute_1m = rates;
      if (minutes == 15) q.per_minute_15m = rates;
      if (minutes == 5) {
        q.per_minute_5m = rates;
        q.attempts_5m = std::lround((rates.completed + rates.retried + rates.dead_lettered) * 5);
        if (q.attempts_5m > 0) {
          q.failure_rate_5m = (rates.retried + rates.dead_lettered) * 5 / static_cast<double>(q.attempts_5m);
        }
        if (rates.completed > 0) q.mean_run_ms_5m = r[7].as<double>() / 1000.0 / (rates.completed * 5);
      }
    }
    for (const auto& r : tx.exec_params(render(kDeadLetterCounts), queue)) {
      QueueStats& q = at(r[0].as<std::string>());
      q.dead_letters = r[1].as<long>();
      q.dead_letters_per_minute_15m = r[2].as<double>();
    }
    for (const auto& r : tx.exec_params(render(kWorkers), queue)) {
      WorkerInfo w;
      w.id = r[0].as<long>();
      w.host = r[1].as<std::string>();
      w.pid = r[2].as<int>();
      w.queues = nlohmann::json::parse(r[3].c_str()).get<std::vector<std::string>>();
      w.started_at = r[4].as<std::string>();
      w.heartbeat_age_s = r[5].as<double>();
      w.jobs_in_flight = r[6].as<int>();
      for (const auto& name : w.queues) {
        if (!queue || *queue == name) at(name);
      }
      stats.workers.push_back(std::move(w));
    }
    tx.commit();
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("lost the connection while reading stats: " + detail::one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(url, schema, "reading stats from schema \"" + std::string(schema) + "\" failed", e);
  }
  for (auto& [name, q] : by_queue) stats.queues.push_back(std::move(q));
  return stats;
}

std::vector<CheckFinding> check(const Stats& stats, const CheckThresholds& t) {
  std::vector<CheckFinding> findings;
  const auto judge = [&](double value, const std::optional<double>& warning, const std::optional<double>& critical,
                         const std::string& what, const std::string& value_text, const auto& threshold_text) {
    if (critical && value > *critical) {
      findings.push_back({CheckStatus::critical, "CRITICAL: " + what + " " + value_text + " (> " + threshold_text(*critical) + ")"});
    } else if (warning && value > *warning) {
      findings.push_back({CheckStatus::warning, "WARNING: " + what + " " + value_text + " (> " + threshold_text(*warning) + ")"});
    }
  };
  const auto count_text = [](double v) { return std::to_string(std::llround(v)); };
  const auto as_optional_double = [](const std::optional<long>& v) {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  for (const QueueStats& q : stats.queues) {
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
    judge(q.dead_letters_per_minute_15m, t.dead_letter_growth_warning, t.dead_letter_growth_critical,
          queue + " dead letters growing at", per_minute(q.dead_letters_per_minute_15m) + " over 15 minutes",
          per_minute);
  }
  std::stable_sort(findings.begin(), findings.end(),
                   [](const CheckFinding& a, const CheckFinding& b) { return a.status > b.status; });
  return findings;
}

}  // namespace oncely
