#include "store/attempts_in_flight.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

constexpr std::string_view kCreateRecord = R"sql(
  INSERT INTO :ONCELY_SCHEMA.attempts_in_flight (worker_id) VALUES ($1) RETURNING id
)sql";

// Runs on the thread's second connection, in autocommit, after the claim holds the row
// locks: any other record naming one of these jobs belongs to a transaction that has
// ended without completing it (a live one would still hold the lock). A record naming one
// job is that job's crashed attempt; a record of a batch only says one of its jobs crashed.
// An upsert, not an UPDATE: if maintenance ever removed this thread's (empty) record
// because its process looked dead, the attempts must still be recorded.
constexpr std::string_view kStartBatch = R"sql(
  WITH recorded AS (
    INSERT INTO :ONCELY_SCHEMA.attempts_in_flight AS f (id, worker_id, job_ids, started_at, job_backend_pid, exclusive)
    OVERRIDING SYSTEM VALUE VALUES ($1, $3, $2::bigint[], now(), $4, $5)
    ON CONFLICT (id) DO UPDATE
      SET job_ids = EXCLUDED.job_ids, started_at = EXCLUDED.started_at, job_backend_pid = EXCLUDED.job_backend_pid,
          exclusive = EXCLUDED.exclusive
  )
  -- Alone: the record of one job that ran with nothing else in flight in its process.
  SELECT j.job_id,
         (count(*) FILTER (WHERE cardinality(f.job_ids) = 1 AND f.exclusive))::int
    FROM :ONCELY_SCHEMA.attempts_in_flight f CROSS JOIN LATERAL unnest(f.job_ids) AS j(job_id)
   WHERE f.id <> $1 AND f.job_ids && $2::bigint[] AND j.job_id = ANY ($2::bigint[])
     -- A live owner rolled its batch back and is clearing its record itself (migration 0004).
     AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = f.job_backend_pid)
   GROUP BY j.job_id
)sql";

constexpr std::string_view kClearRecord = R"sql(
  UPDATE :ONCELY_SCHEMA.attempts_in_flight SET job_ids = '{}' WHERE id = $1
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

constexpr std::string_view kRemoveRecord = R"sql(
  DELETE FROM :ONCELY_SCHEMA.attempts_in_flight WHERE id = $1 AND job_ids = '{}'
)sql";

}  // namespace

AttemptsInFlightTable::AttemptsInFlightTable(StatementSet& statements)
    : statements_(statements),
      create_(&statements.add("create_attempt_record", kCreateRecord)),
      start_(&statements.add("start_attempt_record", kStartBatch)),
      clear_(&statements.add("clear_attempt_record", kClearRecord)),
      narrow_(&statements.add("narrow_attempt_record", kNarrowRecord)),
      remove_(&statements.add("remove_attempt_record", kRemoveRecord)) {}

std::int64_t AttemptsInFlightTable::create(pqxx::transaction_base& tx, std::int64_t worker_id) const {
  return statements_.run(tx, *create_, worker_id).at(0).at(0).as<std::int64_t>();
}

std::vector<UnfinishedAttempts> AttemptsInFlightTable::start(pqxx::transaction_base& tx, std::int64_t record,
                                                             std::int64_t worker_id,
                                                             const std::vector<std::int64_t>& job_ids,
                                                             int job_backend_pid, bool exclusive) const {
  std::vector<UnfinishedAttempts> unfinished;
  for (const auto& row :
       statements_.run(tx, *start_, record, to_array_literal(job_ids), worker_id, job_backend_pid, exclusive)) {
    unfinished.push_back({row[0].as<std::int64_t>(), row[1].as<int>()});
  }
  return unfinished;
}

void AttemptsInFlightTable::clear(pqxx::transaction_base& tx, std::int64_t record) const {
  statements_.run(tx, *clear_, record);
}

void AttemptsInFlightTable::narrow(pqxx::transaction_base& tx, std::int64_t record,
                                   const std::vector<std::int64_t>& started) const {
  statements_.run(tx, *narrow_, record, to_array_literal(started));
}

void AttemptsInFlightTable::remove(pqxx::transaction_base& tx, std::int64_t record) const {
  statements_.run(tx, *remove_, record);
}

}  // namespace oncely::detail
