#include "store/attempts_in_flight.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

constexpr std::string_view kNewStatsKey = R"sql(
  SELECT nextval(':ONCELY_SCHEMA.attempt_slots'::regclass)
)sql";

// Runs on the thread's second connection, in autocommit, after the claim holds the row
// locks: any other record naming one of these jobs belongs to a transaction that has
// ended without completing it (a live one would still hold the lock). A record naming one
// job is that job's crashed attempt; a record of a batch only says one of its jobs crashed.
// The other records are found through the index on their span of job ids (migration 0015),
// so that the versions a held xmin horizon keeps are not read; the new row is not among
// them (the statement's snapshot predates it). One row is returned even when no record is
// found: the new record's id.
constexpr std::string_view kStartRecord = R"sql(
  WITH recorded AS (
    INSERT INTO :ONCELY_SCHEMA.attempts_in_flight (worker_id, job_ids, job_span, started_at, job_backend_pid, exclusive)
    VALUES ($2, $1::bigint[], :SPAN_OF_IDS, now(), $3, $4)
    RETURNING id
  ), unfinished AS (
    -- Alone: the record of one job that ran with nothing else in flight in its process;
    -- the narrowest isolated group: the smallest record that ran so, of a job's records.
    SELECT j.job_id,
           (count(*) FILTER (WHERE cardinality(f.job_ids) = 1 AND f.exclusive))::int AS alone,
           count(*)::int AS crashes,
           coalesce(min(cardinality(f.job_ids)) FILTER (WHERE f.exclusive), 0)::int AS narrowest_isolated
      FROM :ONCELY_SCHEMA.attempts_in_flight f CROSS JOIN LATERAL unnest(f.job_ids) AS j(job_id)
     WHERE (f.job_span && :SPAN_OF_IDS
            OR f.job_span IS NULL)  -- a record of a version-14 worker
       AND f.job_ids && $1::bigint[] AND j.job_id = ANY ($1::bigint[])
       -- A live owner rolled its batch back and is clearing its record itself (migration 0004).
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = f.job_backend_pid)
     GROUP BY j.job_id
  )
  SELECT r.id, u.job_id, u.alone, u.crashes, u.narrowest_isolated FROM recorded r LEFT JOIN unfinished u ON true
)sql";

constexpr std::string_view kClearRecord = R"sql(
  DELETE FROM :ONCELY_SCHEMA.attempts_in_flight WHERE id = $1
)sql";

// Intersects rather than overwrites: a job another worker already counted (and removed
// from this record) must not come back, or its attempt would count twice. The record is
// retired (its owner starts a new one), so it counts even while the connection that ran
// its batch lives on: no backend pid.
constexpr std::string_view kNarrowRecord = R"sql(
  UPDATE :ONCELY_SCHEMA.attempts_in_flight
     SET job_ids = ARRAY(SELECT x FROM unnest(job_ids) AS x WHERE x = ANY ($2::bigint[])), job_backend_pid = NULL
   WHERE id = $1 AND job_ids <> '{}'
)sql";

constexpr std::string_view kRemoveEmptyRecord = R"sql(
  DELETE FROM :ONCELY_SCHEMA.attempts_in_flight WHERE id = $1 AND job_ids = '{}'
)sql";

}  // namespace

std::string with_span_of_ids(std::string_view sql) {
  constexpr std::string_view kToken = ":SPAN_OF_IDS";
  constexpr std::string_view kSpan = "(SELECT int8range(min(x), max(x), '[]') FROM unnest($1::bigint[]) AS x)";
  std::string out(sql);
  for (auto at = out.find(kToken); at != std::string::npos; at = out.find(kToken, at + kSpan.size())) {
    out.replace(at, kToken.size(), kSpan);
  }
  return out;
}

AttemptsInFlightTable::AttemptsInFlightTable(StatementSet& statements)
    : statements_(statements),
      new_stats_key_(&statements.add("new_attempt_slot", kNewStatsKey)),
      start_(&statements.add("start_attempt_record", with_span_of_ids(kStartRecord))),
      clear_(&statements.add("clear_attempt_record", kClearRecord)),
      narrow_(&statements.add("narrow_attempt_record", kNarrowRecord)),
      remove_empty_(&statements.add("remove_empty_attempt_record", kRemoveEmptyRecord)) {}

std::int64_t AttemptsInFlightTable::new_stats_key(pqxx::transaction_base& tx) const {
  return statements_.run(tx, *new_stats_key_).at(0).at(0).as<std::int64_t>();
}

StartedRecord AttemptsInFlightTable::start(pqxx::transaction_base& tx, std::int64_t worker_id,
                                           const std::vector<std::int64_t>& job_ids, int job_backend_pid,
                                           bool exclusive) const {
  StartedRecord started;
  for (const auto& row :
       statements_.run(tx, *start_, to_array_literal(job_ids), worker_id, job_backend_pid, exclusive)) {
    started.id = row[0].as<std::int64_t>();
    if (!row[1].is_null()) {
      started.unfinished.push_back({row[1].as<std::int64_t>(), row[2].as<int>(), row[3].as<int>(), row[4].as<int>()});
    }
  }
  return started;
}

void AttemptsInFlightTable::clear(pqxx::transaction_base& tx, std::int64_t record) const {
  statements_.run(tx, *clear_, record);
}

void AttemptsInFlightTable::narrow(pqxx::transaction_base& tx, std::int64_t record,
                                   const std::vector<std::int64_t>& started) const {
  statements_.run(tx, *narrow_, record, to_array_literal(started));
  statements_.run(tx, *remove_empty_, record);
}

}  // namespace oncely::detail
