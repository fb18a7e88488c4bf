#include "store/jobs.hpp"

#include <limits>

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "store/attempts_in_flight.hpp"
#include "store/job_stats.hpp"
#include "store/ready_jobs.hpp"
#include "support/exact_json.hpp"
#include "support/text.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {
namespace {

constexpr std::string_view kEnqueue = R"sql(
  INSERT INTO :ONCELY_SCHEMA.jobs (kind, payload, queue, idempotency_key, run_at, priority, max_attempts, trace_context,
                                   depends_on, batch_id)
  VALUES ($1, $2::jsonb, $3, $4,
          coalesce($5::timestamptz, now()) + $6::bigint * interval '1 millisecond',
          $7::smallint, $8, $9, $10::bigint[], $11::bigint)
  RETURNING id
)sql";

// COPY cannot RETURN: ids for the rows are drawn from the jobs identity sequence first (in
// ascending order, so a batch keeps its input order among equal priority and run_at).
// The sequence is looked up once (OFFSET 0 keeps the subquery from being inlined): per row,
// the lookup took four times as long as the nextval itself.
constexpr std::string_view kReserveJobIds = R"sql(
  SELECT nextval(s.seq) AS id
    FROM (SELECT pg_get_serial_sequence(':ONCELY_SCHEMA.jobs', 'id')::regclass AS seq OFFSET 0) AS s,
         generate_series(1, $1::int)
   ORDER BY id
)sql";

// The hot path, one round trip: set the transaction's limits, lock a batch of ready jobs,
// and insert their dedup markers. A marker that already exists (its key was processed, or
// a copy claimed by another worker committed first) comes back as no row: the job is a
// duplicate. A copy being processed by another worker right now makes this INSERT wait on
// the unique index until that transaction ends, and then either conflict (it committed) or
// proceed (it rolled back): two copies never both run. Every worker inserts markers in
// (kind, key) order, so two batches waiting on each other's keys cannot deadlock.
// The settings take effect from the next statement on: the handlers' and the completion's.
// :LOCKED defines `claimed`, the jobs to lock: a queue's ready jobs, or one job by id.
constexpr std::string_view kClaimTemplate = R"sql(
  WITH RECURSIVE limits AS MATERIALIZED (
    SELECT set_config('statement_timeout', $3, true),
           set_config('idle_in_transaction_session_timeout', $4, true),
           set_config('client_connection_check_interval', $5, true)
  ), :LOCKED, marked AS (
    INSERT INTO :ONCELY_SCHEMA.processed_jobs (kind, idempotency_key, job_id, queue, completion_xact)
    SELECT kind, idempotency_key, id, queue, pg_current_xact_id() FROM claimed ORDER BY kind, idempotency_key
    ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING job_id, ctid
  ), guarded AS (
    -- Only the batch's completion may commit this transaction (migration 0005).
    INSERT INTO :ONCELY_SCHEMA.commit_guards (xact) SELECT pg_current_xact_id() WHERE EXISTS (SELECT FROM claimed)
  )
  SELECT c.id, c.kind, c.payload::text, c.idempotency_key, c.attempts, c.max_attempts, m.ctid::text,
         (extract(epoch FROM now() - c.created_at) * 1000000)::bigint,
         c.priority, CASE WHEN isfinite(c.run_at) THEN (extract(epoch FROM c.run_at) * 1000000)::bigint END,
         c.origin_job_id, c.trace_context
    FROM claimed c LEFT JOIN marked m ON m.job_id = c.id CROSS JOIN limits
   ORDER BY c.priority, c.run_at, c.id
)sql";

// The claim's jobs: a queue's ready jobs in the claim order (store/ready_jobs.hpp), from
// just after the claim start ($6 priority, $7 run_at in epoch microseconds, $8 id; NULLs:
// from the head of the queue).
std::string queue_jobs_sql() {
  return ready_jobs_scan("claimed",
                         "j.id, j.queue, j.kind, j.payload, j.idempotency_key, j.attempts, j.max_attempts, j.priority, "
                         "j.run_at, j.created_at, j.origin_job_id, j.trace_context",
                         {.queue = 1, .limit = 2, .priority = 6, .run_at_us = 7, .id = 8});
}

constexpr std::string_view kJobsById = R"sql(claimed AS MATERIALIZED (
    SELECT id, queue, kind, payload, idempotency_key, attempts, max_attempts, priority, run_at, created_at,
           origin_job_id, trace_context
      FROM :ONCELY_SCHEMA.jobs
     WHERE id = ANY ($1::bigint[]) AND $2::int > 0
     ORDER BY id
       FOR NO KEY UPDATE SKIP LOCKED
  ))sql";

// The fallback when a claim statement fails on a row it cannot handle (see Executor): the
// rows that claim would have taken, in the same order, from the head or after the same key
// ($3-$5).
std::string lock_ready_sql() {
  return "WITH RECURSIVE " +
         ready_jobs_scan("ready", "j.id, j.priority, j.run_at",
                         {.queue = 1, .limit = 2, .priority = 3, .run_at_us = 4, .id = 5}) +
         "\n  SELECT id FROM ready ORDER BY priority, run_at, id";
}

// A limited queue's jobs with their slots (migration 23); $3 NULL: from the queue; $4
// NULL: no wait for a slot. A NULL id: held back (every slot of the queue held).
constexpr std::string_view kLockLimited = R"sql(
  SELECT id FROM :ONCELY_SCHEMA.lock_ready_limited($1::text, $2::integer, $3::bigint[],
                                                   $4::bigint * interval '1 millisecond') AS id
)sql";

std::string claim_sql(std::string_view locked) {
  std::string sql(kClaimTemplate);
  sql.replace(sql.find(":LOCKED"), std::string_view(":LOCKED").size(), locked);
  return sql;
}

constexpr std::string_view kInterruptedError = "attempt did not finish: its worker died or lost its connection";

constexpr std::string_view kFoldInterrupted = R"sql(
  WITH interrupted AS (
    SELECT * FROM unnest($1::bigint[], $2::int[]) AS t(job_id, n)
  ), forgotten AS (
    UPDATE :ONCELY_SCHEMA.attempts_in_flight f
       SET job_ids = ARRAY(SELECT x FROM unnest(f.job_ids) AS x WHERE x <> ALL ($1::bigint[]))
     WHERE f.id <> $3 AND f.job_ids && $1::bigint[]
       AND (f.job_span && :SPAN_OF_IDS OR f.job_span IS NULL)
  )
  UPDATE :ONCELY_SCHEMA.jobs j
     SET attempts = j.attempts + i.n,
         last_error = $4,
         errors = j.errors || (SELECT jsonb_agg(:ONCELY_SCHEMA.error_entry(j.attempts + g, now(), $4::text, 'crashed'))
                                 FROM generate_series(1, i.n) AS g)
    FROM interrupted i
   WHERE j.id = i.job_id AND i.n > 0
  RETURNING j.id, j.attempts
)sql";

// Completes a batch in one statement: finished jobs (completed or duplicate) go, the
// completed ones' details go into the batch's completion row, which their markers name
// (schema 27: $12-$16 by position, $17 the worker), markers of jobs released unstarted go
// (they were never processed), the batch's outcomes are
// counted (under the thread's slot, $4), the batch's attempt record ($3) goes, and what the
// finished jobs owe their children and batches is settled (migration 24), in the same COMMIT
// that makes the work permanent.
std::string complete_batch_sql() {
  return R"sql(
  WITH finished AS (
    DELETE FROM :ONCELY_SCHEMA.jobs WHERE id = ANY ($1::bigint[]) RETURNING id
  ), recorded AS (
    INSERT INTO :ONCELY_SCHEMA.transaction_completions (xact, completed_at, worker, job_ids, attempts, run_us,
                                                        trace_ids, outputs)
    SELECT pg_current_xact_id(), statement_timestamp(), $17, $12::bigint[], $13::int[], $14::bigint[], $15::text[],
           $16::jsonb[]
     WHERE cardinality($12::bigint[]) > 0
  ), unmarked AS (
    DELETE FROM :ONCELY_SCHEMA.processed_jobs WHERE ctid = ANY ($2::tid[])
  ), counted AS ()sql" +
         JobStatsTable::count_outcomes_sql(4) + R"sql(
  ), unguarded AS (
    DELETE FROM :ONCELY_SCHEMA.commit_guards WHERE xact = pg_current_xact_id()
  ), unrecorded AS (
    DELETE FROM :ONCELY_SCHEMA.attempts_in_flight WHERE id = $3
  )
  -- After the jobs' DELETE (its rows are read first), which settle_dependents() must see.
  SELECT :ONCELY_SCHEMA.settle_dependents(ARRAY(SELECT id FROM finished), 'completed')
)sql";
}

// statement_timestamp(), here and in the dead-letter move, not now(): now() is when the
// batch's transaction began (the claim), before this job's handler ran, which may be
// job_timeout ago; the failure happened just before this statement. $7: the stack of the
// exception that escaped the handler (a JSON array), or NULL.
constexpr std::string_view kRetryJob = R"sql(
  WITH unmarked AS (
    DELETE FROM :ONCELY_SCHEMA.processed_jobs WHERE ctid = $2::tid
  )
  UPDATE :ONCELY_SCHEMA.jobs
     SET attempts = $3, last_error = $4,
         errors = errors || CASE WHEN $5::text IS NULL THEN '[]'::jsonb
                             ELSE jsonb_build_array(
                                    :ONCELY_SCHEMA.error_entry($3::int, statement_timestamp(), $4::text, $5::text, $7::jsonb)) END,
         run_at = statement_timestamp() + $6::bigint * interval '1 millisecond',
         -- A lease left by a queue that ran in lease mode before: the retry fences it out.
         lease_token = NULL, leased_by = NULL
   WHERE id = $1
)sql";

constexpr std::string_view kRelockJob = R"sql(
  SELECT 1 FROM :ONCELY_SCHEMA.jobs WHERE id = $1 AND attempts = $2 FOR NO KEY UPDATE SKIP LOCKED
)sql";

// Jobs per queue. "ready" excludes jobs that registered workers hold right now.
constexpr std::string_view kJobCounts = R"sql(
  WITH held AS (
    SELECT DISTINCT unnest(f.job_ids) AS id
      FROM :ONCELY_SCHEMA.attempts_in_flight f
      JOIN :ONCELY_SCHEMA.workers w ON w.id = f.worker_id
  )
  -- A lease job's run_at is its lease's expiry: while the lease is live the job is running,
  -- not scheduled (once it has expired the job is ready again, to be taken back).
  SELECT j.queue,
         count(*),
         count(*) FILTER (WHERE j.run_at <= now() AND h.id IS NULL),
         count(*) FILTER (WHERE j.run_at > now() AND j.attempts = 0 AND j.lease_token IS NULL
                            AND j.parents_left IS NULL),
         count(*) FILTER (WHERE j.run_at > now() AND j.attempts > 0 AND j.lease_token IS NULL),
         count(h.id) + count(*) FILTER (WHERE j.run_at > now() AND j.lease_token IS NOT NULL),
         extract(epoch FROM now() - min(j.run_at) FILTER (WHERE j.run_at <= now() AND h.id IS NULL))::float8,
         count(*) FILTER (WHERE j.parents_left IS NOT NULL)
    FROM :ONCELY_SCHEMA.jobs j LEFT JOIN held h ON h.id = j.id
   WHERE $1::text IS NULL OR j.queue = $1
   GROUP BY j.queue
)sql";

std::vector<ClaimedJob> claimed_jobs(const pqxx::result& rows) {
  std::vector<ClaimedJob> jobs;
  jobs.reserve(rows.size());
  for (const auto& row : rows) {
    ClaimedJob job;
    job.id = row[0].as<std::int64_t>();
    job.kind = row[1].as<std::string>();
    // Kept as text: handlers that read it as JSON do so themselves (JobContext::payload()),
    // so that a payload jsonb holds but nlohmann cannot (1e400) fails only its own job.
    job.payload_text = row[2].as<std::string>();
    job.idempotency_key = nullable<std::string>(row[3]);
    job.attempts = row[4].as<int>();
    job.claimed_attempts = job.attempts;
    job.max_attempts = nullable<int>(row[5]);
    job.marker = nullable<std::string>(row[6]);
    job.waited_us = row[7].as<std::int64_t>();
    // A run_at of -infinity has no position a later claim could start after.
    if (!row[9].is_null()) job.key = ClaimKey{row[8].as<int>(), row[9].as<std::int64_t>(), job.id};
    job.origin_job_id = nullable<std::int64_t>(row[10]);
    job.trace_context = nullable<std::string>(row[11]);
    jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace

JobsTable::JobsTable(StatementSet& statements)
    : statements_(statements),
      copy_table_(render_statement(":ONCELY_SCHEMA.jobs", statements.schema())),
      enqueue_(&statements.add("enqueue", kEnqueue)),
      reserve_ids_(&statements.add("reserve_ids", kReserveJobIds)),
      claim_(&statements.add("claim", claim_sql(queue_jobs_sql()))),
      lock_ready_(&statements.add("lock_ready", lock_ready_sql())),
      lock_limited_(&statements.add("lock_limited", kLockLimited)),
      claim_by_ids_(&statements.add("claim_by_ids", claim_sql(kJobsById))),
      fold_interrupted_(&statements.add("fold_interrupted", with_span_of_ids(kFoldInterrupted))),
      complete_batch_(&statements.add("complete_batch", complete_batch_sql())),
      retry_(&statements.add("retry_job", kRetryJob)),
      relock_(&statements.add("relock_job", kRelockJob)),
      depths_(&statements.add("job_counts", kJobCounts)) {}

std::optional<std::string> parents_literal(const NewJob& job) {
  if (job.depends_on.empty()) return std::nullopt;
  return to_array_literal(job.depends_on);
}

std::int64_t JobsTable::enqueue(pqxx::transaction_base& tx, const NewJob& job) const {
  validate_new_job(job);
  // Enqueue runs on callers' connections, which never prepared our statements.
  return tx
      .exec_params1(enqueue_->sql, job.kind, payload_text(job), job.queue, job.idempotency_key, job.run_at,
                    static_cast<std::int64_t>(job.delay.count()), job.priority, job.max_attempts, job.traceparent,
                    parents_literal(job), job.batch_id)[0]
      .as<std::int64_t>();
}

std::int64_t JobsTable::enqueue_prepared(pqxx::transaction_base& tx, const NewJob& job) const {
  validate_new_job(job);
  return statements_
      .run(tx, *enqueue_, job.kind, payload_text(job), job.queue, job.idempotency_key, job.run_at,
           static_cast<std::int64_t>(job.delay.count()), job.priority, job.max_attempts, job.traceparent,
           parents_literal(job), job.batch_id)
      .at(0)
      .at(0)
      .as<std::int64_t>();
}

std::vector<std::int64_t> JobsTable::reserve_ids(pqxx::transaction_base& tx, int n) const {
  // On callers' connections too (Client::enqueue_batch): unnamed.
  std::vector<std::int64_t> ids;
  ids.reserve(static_cast<std::size_t>(n));
  for (const auto& row : tx.exec_params(reserve_ids_->sql, n)) ids.push_back(row[0].as<std::int64_t>());
  return ids;
}

const std::vector<std::string>& JobsTable::copy_columns(bool with_id) {
  static const std::vector<std::string> without{"kind",       "payload",  "queue",        "idempotency_key",
                                                "run_at",     "priority", "max_attempts", "trace_context",
                                                "depends_on", "batch_id"};
  static const std::vector<std::string> with{"id",      "kind",     "payload",      "queue",         "idempotency_key",
                                             "run_at",  "priority", "max_attempts", "trace_context", "depends_on",
                                             "batch_id"};
  return with_id ? with : without;
}

std::vector<ClaimedJob> JobsTable::claim(pqxx::transaction_base& tx, std::string_view queue, int limit,
                                         const TransactionLimits& limits, const std::optional<ClaimKey>& after) const {
  return claimed_jobs(statements_.run(
      tx, *claim_, std::string(queue), limit, limits.statement_timeout, limits.idle_in_transaction_session_timeout,
      limits.client_connection_check_interval, after ? std::optional<int>(after->priority) : std::nullopt,
      after ? std::optional<std::int64_t>(after->run_at_us) : std::nullopt,
      after ? std::optional<std::int64_t>(after->id) : std::nullopt));
}

std::vector<std::int64_t> JobsTable::lock_ready(pqxx::transaction_base& tx, std::string_view queue, int limit,
                                                const std::optional<ClaimKey>& after) const {
  std::vector<std::int64_t> ids;
  for (const auto& row : statements_.run(tx, *lock_ready_, std::string(queue), limit,
                                         after ? std::optional<int>(after->priority) : std::nullopt,
                                         after ? std::optional<std::int64_t>(after->run_at_us) : std::nullopt,
                                         after ? std::optional<std::int64_t>(after->id) : std::nullopt)) {
    ids.push_back(row[0].as<std::int64_t>());
  }
  return ids;
}

JobsTable::LimitedJobs JobsTable::lock_limited(pqxx::transaction_base& tx, std::string_view queue, int limit,
                                               const std::vector<std::int64_t>& only_ids,
                                               std::optional<std::chrono::milliseconds> wait) const {
  LimitedJobs jobs;
  for (const auto& row :
       statements_.run(tx, *lock_limited_, std::string(queue), limit,
                       only_ids.empty() ? std::nullopt : std::optional<std::string>(to_array_literal(only_ids)),
                       wait ? std::optional<std::int64_t>(wait->count()) : std::nullopt)) {
    if (row[0].is_null()) {
      jobs.held_back = true;
    } else {
      jobs.ids.push_back(row[0].as<std::int64_t>());
    }
  }
  return jobs;
}

std::vector<ClaimedJob> JobsTable::claim_by_ids(pqxx::transaction_base& tx, const std::vector<std::int64_t>& ids,
                                                const TransactionLimits& limits) const {
  return claimed_jobs(statements_.run(tx, *claim_by_ids_, to_array_literal(ids), 1, limits.statement_timeout,
                                      limits.idle_in_transaction_session_timeout,
                                      limits.client_connection_check_interval));
}

std::vector<std::pair<std::int64_t, int>> JobsTable::fold_interrupted(
    pqxx::transaction_base& tx, const std::vector<std::pair<std::int64_t, int>>& jobs, std::int64_t own_record) const {
  std::vector<std::int64_t> ids;
  std::vector<int> counts;
  for (const auto& [id, n] : jobs) {
    ids.push_back(id);
    counts.push_back(n);
  }
  std::vector<std::pair<std::int64_t, int>> attempts;
  for (const auto& row : statements_.run(tx, *fold_interrupted_, to_array_literal(ids), to_array_literal(counts),
                                         own_record, std::string(kInterruptedError))) {
    attempts.emplace_back(row[0].as<std::int64_t>(), row[1].as<int>());
  }
  return attempts;
}

void JobsTable::complete_batch(pqxx::transaction_base& tx, const BatchCompletion& batch) const {
  std::vector<std::int64_t> job_ids;
  std::vector<int> attempts;
  std::vector<std::int64_t> run_us;
  std::vector<std::optional<std::string>> trace_ids;
  std::vector<std::optional<std::string>> outputs;
  for (const CompletedAttempt& m : batch.completed) {
    job_ids.push_back(m.job_id);
    attempts.push_back(m.record.attempt);
    run_us.push_back(m.record.run_time_us);
    trace_ids.push_back(m.record.trace_id);
    outputs.push_back(m.record.output);
  }
  const OutcomeCounts& c = batch.counts;
  statements_.run(tx, *complete_batch_, to_array_literal(batch.finished_ids), to_array_literal(batch.released_markers),
                  batch.record, batch.slot, std::string(batch.queue), c.completed, c.deduplicated, c.retried,
                  c.dead_lettered, c.crashed, c.run_time_us, to_array_literal(job_ids), to_array_literal(attempts),
                  to_array_literal(run_us), to_array_literal(trace_ids), to_array_literal(outputs),
                  std::string(batch.worker));
}

void JobsTable::retry(pqxx::transaction_base& tx, const FailureRecord& f, std::chrono::milliseconds delay) const {
  statements_.run(tx, *retry_, f.job_id, f.marker, f.attempts, f.error, f.attempt_class,
                  static_cast<std::int64_t>(delay.count()),
                  f.detail.contains("stack") ? std::optional<std::string>(f.detail["stack"].dump()) : std::nullopt);
}

bool JobsTable::relock(pqxx::transaction_base& tx, std::int64_t id, int seen_attempts) const {
  return !statements_.run(tx, *relock_, id, seen_attempts).empty();
}

void JobsTable::read_depths(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                            std::map<std::string, QueueStats>& by_queue) const {
  for (const auto& r : statements_.run(tx, *depths_, queue)) {
    QueueStats& q = queue_entry(by_queue, r[0].as<std::string>());
    q.depth = r[1].as<long>();
    q.ready = r[2].as<long>();
    q.scheduled = r[3].as<long>();
    q.retrying = r[4].as<long>();
    q.in_flight = r[5].as<long>();
    q.oldest_ready_age_s = nullable<double>(r[6]);
    q.waiting = r[7].as<long>();
  }
}

}  // namespace oncely::detail
