#include "store/job_stats.hpp"

#include <cmath>

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

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

// The history behind the console's charts: one scan of the window's rows (the minute
// index; a day is some thousand rows per worker thread and queue, maintenance keeps no
// more), summed per bucket, joined to every bucket so that quiet ones show as zeros.
// $1 queue (NULL: all), $2 buckets, $3 minutes per bucket.
constexpr std::string_view kHistory = R"sql(
  WITH w AS (
    SELECT date_trunc('minute', now()) - ($2::int * $3::int - 1) * interval '1 minute' AS t0
  ), sums AS (
    SELECT (floor(extract(epoch FROM s.minute - w.t0) / 60 / $3::int))::int AS i,
           sum(completed) AS completed, sum(retried) AS retried, sum(dead_lettered) AS dead_lettered,
           sum(deduplicated) AS deduplicated, sum(crashed) AS crashed
      FROM :ONCELY_SCHEMA.job_stats s CROSS JOIN w
     WHERE s.minute >= w.t0
       AND ($1::text IS NULL OR s.queue = $1)
     GROUP BY 1
  )
  SELECT to_char((w.t0 + b.i * $3::int * interval '1 minute') AT TIME ZONE 'UTC', :ISO_UTC),
         coalesce(s.completed, 0), coalesce(s.retried, 0), coalesce(s.dead_lettered, 0),
         coalesce(s.deduplicated, 0), coalesce(s.crashed, 0)
    FROM w CROSS JOIN generate_series(0, $2::int - 1) AS b(i)
    LEFT JOIN sums s ON s.i = b.i
   ORDER BY b.i
)sql";

}  // namespace

std::vector<OutcomeBucket> JobStatsTable::history(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                                                  int buckets, int bucket_minutes) const {
  std::vector<OutcomeBucket> out;
  for (const auto& r : tx.exec_params(history_, queue, buckets, bucket_minutes)) {
    out.push_back(
        {r[0].as<std::string>(), r[1].as<long>(), r[2].as<long>(), r[3].as<long>(), r[4].as<long>(), r[5].as<long>()});
  }
  return out;
}

std::string JobStatsTable::count_outcomes_sql(int n) {
  const auto p = [n](int i) { return "$" + std::to_string(n + i); };
  std::string counters;
  std::string any;
  for (int i = 2; i < 8; ++i) {
    counters += ", " + p(i) + "::bigint";
    if (i < 7) any += (i > 2 ? " + " : "") + p(i) + "::bigint";
  }
  return R"sql(
    INSERT INTO :ONCELY_SCHEMA.job_stats AS s
           (slot_id, minute, queue, completed, deduplicated, retried, dead_lettered, crashed, run_time_us)
    SELECT )sql" +
         p(0) + ", date_trunc('minute', now()), " + p(1) + counters + R"sql(
     WHERE )sql" +
         any + R"sql( > 0
    ON CONFLICT (slot_id, minute, queue) DO UPDATE
       SET completed = s.completed + EXCLUDED.completed, deduplicated = s.deduplicated + EXCLUDED.deduplicated,
           retried = s.retried + EXCLUDED.retried, dead_lettered = s.dead_lettered + EXCLUDED.dead_lettered,
           crashed = s.crashed + EXCLUDED.crashed, run_time_us = s.run_time_us + EXCLUDED.run_time_us)sql";
}

JobStatsTable::JobStatsTable(StatementSet& statements)
    : statements_(statements),
      count_outcomes_(&statements.add("count_outcomes", count_outcomes_sql(1))),
      prune_(&statements.add("prune_stats", prune_older_sql("job_stats", "minute"))),
      rates_(&statements.add("outcome_rates", kOutcomeCounts)),
      history_(render_statement(kHistory, statements.schema())) {}

QueueStats& queue_entry(std::map<std::string, QueueStats>& by_queue, const std::string& name) {
  QueueStats& q = by_queue[name];
  q.queue = name;
  return q;
}

void JobStatsTable::count_outcomes(pqxx::transaction_base& tx, std::int64_t record, std::string_view queue,
                                   const OutcomeCounts& c) const {
  statements_.run(tx, *count_outcomes_, record, std::string(queue), c.completed, c.deduplicated, c.retried,
                  c.dead_lettered, c.crashed, c.run_time_us);
}

long JobStatsTable::prune(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const {
  return static_cast<long>(
      statements_.run(tx, *prune_, static_cast<std::int64_t>(window.count()), limit).affected_rows());
}

void JobStatsTable::read_rates(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                               std::map<std::string, QueueStats>& by_queue) const {
  for (const auto& r : statements_.run(tx, *rates_, queue)) {
    QueueStats& q = queue_entry(by_queue, r[0].as<std::string>());
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
}

}  // namespace oncely::detail
