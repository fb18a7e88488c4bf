#include "store.hpp"

#include <algorithm>
#include <limits>

#include <pqxx/pqxx>

#include "exact_json.hpp"
#include "oncely/errors.hpp"
#include "schema.hpp"
#include "text.hpp"

namespace oncely::detail {
namespace {

constexpr std::string_view kEnqueue = R"sql(
  INSERT INTO :ONCELY_SCHEMA.jobs (kind, payload, queue, idempotency_key, run_at, priority, max_attempts)
  VALUES ($1, $2::jsonb, $3, $4,
          coalesce($5::timestamptz, now()) + $6::bigint * interval '1 millisecond',
          $7::smallint, $8)
  RETURNING id
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
    INSERT INTO :ONCELY_SCHEMA.processed_jobs (kind, idempotency_key, job_id, queue)
    SELECT kind, idempotency_key, id, queue FROM claimed ORDER BY kind, idempotency_key
    ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING job_id, ctid
  ), guarded AS (
    -- Only the batch's completion may commit this transaction (migration 0005).
    INSERT INTO :ONCELY_SCHEMA.commit_guards (xact) SELECT pg_current_xact_id() WHERE EXISTS (SELECT FROM claimed)
  )
  SELECT c.id, c.kind, c.payload::text, c.idempotency_key, c.attempts, c.max_attempts, m.ctid::text,
         (extract(epoch FROM now() - c.created_at) * 1000000)::bigint,
         c.priority, CASE WHEN isfinite(c.run_at) THEN (extract(epoch FROM c.run_at) * 1000000)::bigint END,
         c.origin_job_id
    FROM claimed c LEFT JOIN marked m ON m.job_id = c.id CROSS JOIN limits
   ORDER BY c.priority, c.run_at, c.id
)sql";

// A queue's ready jobs in (priority, run_at, id) order, from just after the claim-index key
// ($6 priority, $7 run_at in epoch microseconds, $8 id; NULLs: from the head of the queue).
// One priority level at a time, so that within a level `run_at <= now()` ends the index
// range and jobs scheduled for later are never walked, and (run_at, id) > ... starts it
// (Postgres starts a scan at a row comparison only on the columns after the equalities).
// The next level is one index descent (`levels` skips through the index), taken only if
// the batch is not full yet. Starting
// after the previous claim's last job skips the index entries of jobs already done, which
// stay in the index until vacuum (see Executor::claim_after_).
constexpr std::string_view kQueueJobs = R"sql(levels(priority) AS (
    SELECT coalesce($6::smallint, (-32768)::smallint)
    UNION ALL
    SELECT (SELECT min(j.priority) FROM :ONCELY_SCHEMA.jobs j WHERE j.queue = $1 AND j.priority > levels.priority)
      FROM levels
     WHERE levels.priority IS NOT NULL
  ), claimed AS MATERIALIZED (
    SELECT ready.* FROM levels CROSS JOIN LATERAL (
      SELECT id, queue, kind, payload, idempotency_key, attempts, max_attempts, priority, run_at, created_at,
             origin_job_id
        FROM :ONCELY_SCHEMA.jobs
       WHERE queue = $1 AND priority = levels.priority AND run_at <= now()
         AND (run_at, id) > (CASE WHEN levels.priority = $6::smallint
                                  THEN 'epoch'::timestamptz + $7::bigint * interval '1 microsecond'
                                  ELSE '-infinity' END,
                             CASE WHEN levels.priority = $6::smallint THEN $8::bigint ELSE 0 END)
       ORDER BY run_at, id
       LIMIT $2
         FOR UPDATE SKIP LOCKED
    ) ready
    LIMIT $2
  ))sql";

constexpr std::string_view kJobById = R"sql(claimed AS MATERIALIZED (
    SELECT id, queue, kind, payload, idempotency_key, attempts, max_attempts, priority, run_at, created_at,
           origin_job_id
      FROM :ONCELY_SCHEMA.jobs
     WHERE id = $1 AND $2::int > 0
       FOR UPDATE SKIP LOCKED
  ))sql";

// The fallback when a claim statement fails on a row it cannot handle (see Executor).
constexpr std::string_view kLockReady = R"sql(
  SELECT id FROM :ONCELY_SCHEMA.jobs
   WHERE queue = $1 AND run_at <= now()
   ORDER BY priority, run_at, id
   LIMIT $2
     FOR UPDATE SKIP LOCKED
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
  )
  UPDATE :ONCELY_SCHEMA.jobs j
     SET attempts = j.attempts + i.n,
         last_error = $4,
         errors = j.errors || (SELECT jsonb_agg(jsonb_build_object('attempt', j.attempts + g, 'at', now(),
                                                                   'error', $4::text, 'class', 'crashed'))
                                 FROM generate_series(1, i.n) AS g)
    FROM interrupted i
   WHERE j.id = i.job_id AND i.n > 0
  RETURNING j.id, j.attempts
)sql";

// Adds a transaction's outcomes to the job_stats row of (thread, minute, queue). Used inside
// the completion below and on its own; `n` is the number of its first parameter: slot,
// queue, then the six counters.
std::string count_outcomes_sql(int n) {
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
    SELECT )sql" + p(0) + ", date_trunc('minute', now()), " + p(1) + counters + R"sql(
     WHERE )sql" + any + R"sql( > 0
    ON CONFLICT (slot_id, minute, queue) DO UPDATE
       SET completed = s.completed + EXCLUDED.completed, deduplicated = s.deduplicated + EXCLUDED.deduplicated,
           retried = s.retried + EXCLUDED.retried, dead_lettered = s.dead_lettered + EXCLUDED.dead_lettered,
           crashed = s.crashed + EXCLUDED.crashed, run_time_us = s.run_time_us + EXCLUDED.run_time_us)sql";
}

// Completes a batch in one statement: finished jobs (completed or duplicate) go, markers
// of jobs released unstarted go (they were never processed), the batch's outcomes are
// counted, and the thread's attempt record empties in the same COMMIT that makes the work
// permanent.
std::string complete_batch_sql() {
  return R"sql(
  WITH finished AS (
    DELETE FROM :ONCELY_SCHEMA.jobs WHERE id = ANY ($1::bigint[])
  ), unmarked AS (
    DELETE FROM :ONCELY_SCHEMA.processed_jobs WHERE ctid = ANY ($2::tid[])
  ), counted AS ()sql" + count_outcomes_sql(3) + R"sql(
  ), unguarded AS (
    DELETE FROM :ONCELY_SCHEMA.commit_guards WHERE xact = pg_current_xact_id()
  )
  UPDATE :ONCELY_SCHEMA.attempts_in_flight SET job_ids = '{}' WHERE id = $3
)sql";
}

constexpr std::string_view kRetryJob = R"sql(
  WITH unmarked AS (
    DELETE FROM :ONCELY_SCHEMA.processed_jobs WHERE ctid = $2::tid
  )
  UPDATE :ONCELY_SCHEMA.jobs
     SET attempts = $3, last_error = $4,
         errors = errors || CASE WHEN $5::text IS NULL THEN '[]'::jsonb
                             ELSE jsonb_build_array(jsonb_build_object('attempt', $3::int, 'at', statement_timestamp(), 'error', $4::text, 'class', $5::text)) END,
         run_at = statement_timestamp() + $6::bigint * interval '1 millisecond'
   WHERE id = $1
)sql";

// The job leaves jobs and enters dead_letters in the same statement: never in both, never
// in neither. Its marker goes too, so a replay is not mistaken for a duplicate.
// statement_timestamp(), here and in kRetryJob, not now(): now() is when the batch's
// transaction began (the claim), before this job's handler ran, which may be job_timeout
// ago; the failure happened just before this statement.
constexpr std::string_view kDeadLetterJob = R"sql(
  WITH unmarked AS (
    DELETE FROM :ONCELY_SCHEMA.processed_jobs WHERE ctid = $2::tid
  ), moved AS (
    DELETE FROM :ONCELY_SCHEMA.jobs WHERE id = $1 RETURNING *
  )
  INSERT INTO :ONCELY_SCHEMA.dead_letters
         (job_id, queue, kind, payload, idempotency_key, priority, attempts, max_attempts,
          last_error, error_class, errors, error_detail, created_at, origin_job_id, failed_at)
  SELECT id, queue, kind, payload, idempotency_key, priority, coalesce($3::int, attempts), max_attempts, $4, $6,
         errors || CASE WHEN $5::text IS NULL THEN '[]'::jsonb
                             ELSE jsonb_build_array(jsonb_build_object('attempt', $3::int, 'at', statement_timestamp(), 'error', $4::text, 'class', $5::text)) END,
         $7::jsonb, created_at, coalesce(origin_job_id, id), statement_timestamp()
    FROM moved
)sql";

constexpr std::string_view kRelockJob = R"sql(
  SELECT 1 FROM :ONCELY_SCHEMA.jobs WHERE id = $1 AND attempts = $2 FOR UPDATE SKIP LOCKED
)sql";

constexpr std::string_view kCreateSlot = R"sql(
  INSERT INTO :ONCELY_SCHEMA.attempts_in_flight (worker_id) VALUES ($1) RETURNING id
)sql";

// Runs on the thread's second connection, in autocommit, after the claim holds the row
// locks: any other record naming one of these jobs belongs to a transaction that has
// ended without completing it (a live one would still hold the lock). A record naming one
// job is that job's crashed attempt; a record of a batch only says one of its jobs crashed.
// An upsert, not an UPDATE: if maintenance ever removed this thread's (empty) record
// because its process looked dead, the attempts must still be recorded.
constexpr std::string_view kRecordAttempts = R"sql(
  WITH recorded AS (
    INSERT INTO :ONCELY_SCHEMA.attempts_in_flight AS f (id, worker_id, job_ids, started_at, job_backend_pid, exclusive)
    OVERRIDING SYSTEM VALUE VALUES ($1, $3, $2::bigint[], now(), $4, $5)
    ON CONFLICT (id) DO UPDATE
      SET job_ids = EXCLUDED.job_ids, started_at = EXCLUDED.started_at, job_backend_pid = EXCLUDED.job_backend_pid,
          exclusive = EXCLUDED.exclusive
  )
  -- Alone: the record of one job that ran with nothing else in flight in its process.
  SELECT j.job_id,
         (count(*) FILTER (WHERE cardinality(f.job_ids) = 1 AND f.exclusive))::int,
         (count(*) FILTER (WHERE cardinality(f.job_ids) > 1 OR NOT f.exclusive))::int
    FROM :ONCELY_SCHEMA.attempts_in_flight f CROSS JOIN LATERAL unnest(f.job_ids) AS j(job_id)
   WHERE f.id <> $1 AND f.job_ids && $2::bigint[] AND j.job_id = ANY ($2::bigint[])
     -- A live owner rolled its batch back and is clearing its record itself (migration 0004).
     AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = f.job_backend_pid)
   GROUP BY j.job_id
)sql";

constexpr std::string_view kClearSlot = R"sql(
  UPDATE :ONCELY_SCHEMA.attempts_in_flight SET job_ids = '{}' WHERE id = $1
)sql";

// Intersects rather than overwrites: a job another worker already counted (and removed
// from this record) must not come back, or its attempt would count twice. The record is
// retired (its owner starts a new one), so it counts even while the connection that ran
// its batch lives on: no backend pid.
constexpr std::string_view kNarrowSlot = R"sql(
  UPDATE :ONCELY_SCHEMA.attempts_in_flight
     SET job_ids = ARRAY(SELECT x FROM unnest(job_ids) AS x WHERE x = ANY ($2::bigint[])), job_backend_pid = NULL
   WHERE id = $1 AND job_ids <> '{}'
)sql";

constexpr std::string_view kDeleteSlot = R"sql(
  DELETE FROM :ONCELY_SCHEMA.attempts_in_flight WHERE id = $1 AND job_ids = '{}'
)sql";

constexpr std::string_view kRegisterWorker = R"sql(
  INSERT INTO :ONCELY_SCHEMA.workers (host, pid, queues) VALUES ($1, $2, $3::text[]) RETURNING id
)sql";

// An upsert: a process whose heartbeat was late enough to be removed as stale (a long
// database outage) registers again under the same id.
constexpr std::string_view kHeartbeat = R"sql(
  INSERT INTO :ONCELY_SCHEMA.workers AS w (id, host, pid, queues, jobs_in_flight)
  OVERRIDING SYSTEM VALUE VALUES ($1, $3, $4, $5::text[], $2)
  ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), jobs_in_flight = EXCLUDED.jobs_in_flight
)sql";

constexpr std::string_view kUnregisterWorker = R"sql(
  WITH idle_slots AS (
    DELETE FROM :ONCELY_SCHEMA.attempts_in_flight WHERE worker_id = $1 AND job_ids = '{}'
  )
  DELETE FROM :ONCELY_SCHEMA.workers WHERE id = $1
)sql";

// An attempt record stays while any job it names exists: it is what counts the attempt.
constexpr std::string_view kRemoveStaleWorkers = R"sql(
  WITH gone AS (
    DELETE FROM :ONCELY_SCHEMA.workers
     WHERE heartbeat_at < now() - $1::bigint * interval '1 millisecond'
    RETURNING id
  )
  DELETE FROM :ONCELY_SCHEMA.attempts_in_flight f
   WHERE (f.worker_id IN (SELECT id FROM gone)
          OR NOT EXISTS (SELECT 1 FROM :ONCELY_SCHEMA.workers w WHERE w.id = f.worker_id))
     AND NOT EXISTS (SELECT 1 FROM :ONCELY_SCHEMA.jobs j WHERE j.id = ANY (f.job_ids))
)sql";

// Two-key advisory lock: "mtnc" and the schema's hash, so schemas do not share a leader.
constexpr std::string_view kTryMaintenanceLock = R"sql(
  SELECT pg_try_advisory_xact_lock(1836346979, hashtext($1))
)sql";

// Session-level ("mtrc", schema): re-taking a lock this session holds succeeds and stacks,
// so it is taken only while not yet held.
constexpr std::string_view kTryMetricsLeadership = R"sql(
  SELECT EXISTS (SELECT 1 FROM pg_locks
                  WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
                    AND classid = 1836413539 AND objid = hashtext($1)::oid AND objsubid = 2)
      OR pg_try_advisory_lock(1836413539, hashtext($1))
)sql";

// Oldest first, in batches, by the BRIN index on processed_at.
constexpr std::string_view kPruneMarkers = R"sql(
  DELETE FROM :ONCELY_SCHEMA.processed_jobs
   WHERE ctid = ANY (ARRAY(SELECT ctid FROM :ONCELY_SCHEMA.processed_jobs
                            WHERE processed_at < now() - $1::bigint * interval '1 millisecond'
                            LIMIT $2))
)sql";

constexpr std::string_view kPruneStats = R"sql(
  DELETE FROM :ONCELY_SCHEMA.job_stats
   WHERE ctid = ANY (ARRAY(SELECT ctid FROM :ONCELY_SCHEMA.job_stats
                            WHERE minute < now() - $1::bigint * interval '1 millisecond'
                            LIMIT $2))
)sql";

constexpr std::string_view kSchemaVersion = R"sql(
  SELECT coalesce(max(version), 0) FROM :ONCELY_SCHEMA.schema_migrations
)sql";

// libpqxx 6.4 cannot read a field into std::optional; this can.
template <typename T>
std::optional<T> nullable(const pqxx::field& f) {
  return f.is_null() ? std::nullopt : std::optional<T>(f.as<T>());
}

template <typename T>
std::string join_array(const std::vector<T>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    if constexpr (std::is_same_v<T, std::string>) {
      out += '"';
      for (const char c : values[i]) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      out += '"';
    } else {
      out += std::to_string(values[i]);
    }
  }
  return out + "}";
}

}  // namespace

std::string to_array_literal(const std::vector<std::int64_t>& values) { return join_array(values); }
std::string to_array_literal(const std::vector<int>& values) { return join_array(values); }
std::string to_array_literal(const std::vector<std::string>& values) { return join_array(values); }

void validate_new_job(const NewJob& job) {
  validate_job_fields(job);
  if (!job.payload_json) return;
  try {
    exact_json::validate(*job.payload_json);
  } catch (const exact_json::SyntaxError& e) {
    throw ConfigError("payload_json", exact_json::describe(e));
  }
}

std::string payload_text(const NewJob& job, bool ascii) {
  if (job.payload_json) return *job.payload_json;
  return ascii ? job.payload.dump(-1, ' ', true) : job.payload.dump();
}

void validate_job_fields(const NewJob& job) {
  if (job.kind.empty()) throw ConfigError("kind", "must not be empty");
  if (job.queue.empty()) throw ConfigError("queue", "must not be empty");
  // No worker serves a queue whose name holds a control character (the configuration
  // refuses them), and a kind's would reach log lines raw.
  if (has_control_character(job.kind)) throw ConfigError("kind", "must not contain control characters");
  if (has_control_character(job.queue)) throw ConfigError("queue", "must not contain control characters");
  // The bounds of migration 0005 (one btree entry must hold them), said before the server does.
  if (job.queue.size() > kMaxQueueBytes) throw ConfigError("queue", "must be at most 128 bytes");
  if (job.kind.size() > kMaxKindBytes) throw ConfigError("kind", "must be at most 255 bytes");
  if (job.idempotency_key && job.idempotency_key->size() > kMaxIdempotencyKeyBytes) {
    throw ConfigError("idempotency_key", "must be at most 1024 bytes");
  }
  if (job.idempotency_key && job.idempotency_key->empty()) {
    throw ConfigError("idempotency_key", "must not be empty (omit it to use the job id)");
  }
  if (job.priority < std::numeric_limits<std::int16_t>::min() || job.priority > std::numeric_limits<std::int16_t>::max()) {
    throw ConfigError("priority", "must be between -32768 and 32767");
  }
  if (job.max_attempts && *job.max_attempts < 1) throw ConfigError("max_attempts", "must be at least 1");
}

Store::Statement Store::statement(std::string_view name, std::string_view sql) const {
  return Statement{"oncely_" + std::string(name), render_sql(sql, schema_)};
}

Store::Store(std::string_view schema, bool prepared)
    : schema_(schema),
      prepared_(prepared),
      enqueue_(statement("enqueue", kEnqueue)),
      claim_(statement("claim", claim_sql(kQueueJobs))),
      lock_ready_(statement("lock_ready", kLockReady)),
      claim_by_id_(statement("claim_by_id", claim_sql(kJobById))),
      fold_interrupted_(statement("fold_interrupted", kFoldInterrupted)),
      complete_batch_(statement("complete_batch", complete_batch_sql())),
      retry_job_(statement("retry_job", kRetryJob)),
      count_outcomes_(statement("count_outcomes", count_outcomes_sql(1))),
      dead_letter_job_(statement("dead_letter_job", kDeadLetterJob)),
      relock_job_(statement("relock_job", kRelockJob)),
      create_slot_(statement("create_slot", kCreateSlot)),
      record_attempts_(statement("record_attempts", kRecordAttempts)),
      clear_slot_(statement("clear_slot", kClearSlot)),
      narrow_slot_(statement("narrow_slot", kNarrowSlot)),
      delete_slot_(statement("delete_slot", kDeleteSlot)),
      register_worker_(statement("register_worker", kRegisterWorker)),
      heartbeat_(statement("heartbeat", kHeartbeat)),
      unregister_worker_(statement("unregister_worker", kUnregisterWorker)),
      remove_stale_workers_(statement("remove_stale_workers", kRemoveStaleWorkers)),
      try_metrics_leadership_(statement("try_metrics_leadership", kTryMetricsLeadership)),
      try_maintenance_lock_(statement("try_maintenance_lock", kTryMaintenanceLock)),
      prune_markers_(statement("prune_markers", kPruneMarkers)),
      prune_stats_(statement("prune_stats", kPruneStats)),
      schema_version_(statement("schema_version", kSchemaVersion)),
      all_{&enqueue_, &claim_, &lock_ready_, &claim_by_id_,           &fold_interrupted_, &complete_batch_,     &retry_job_, &count_outcomes_,
           &dead_letter_job_, &relock_job_,  &create_slot_,      &record_attempts_,    &clear_slot_, &narrow_slot_,
           &delete_slot_, &register_worker_, &heartbeat_,        &unregister_worker_, &remove_stale_workers_,
           &try_metrics_leadership_, &try_maintenance_lock_, &prune_markers_, &prune_stats_, &schema_version_} {}

void Store::prepare(pqxx::connection& conn) const {
  if (!prepared_) return;
  for (const Statement* s : all_) conn.prepare(s->name, s->sql);
}

template <typename... Args>
pqxx::result Store::run(pqxx::transaction_base& tx, const Statement& s, Args&&... args) const {
  if (prepared_) return tx.exec_prepared(s.name, std::forward<Args>(args)...);
  return tx.exec_params(s.sql, std::forward<Args>(args)...);
}

std::int64_t Store::enqueue(pqxx::transaction_base& tx, const NewJob& job) const {
  validate_new_job(job);
  // Enqueue runs on callers' connections, which never prepared our statements.
  return tx.exec_params1(enqueue_.sql, job.kind, payload_text(job), job.queue, job.idempotency_key, job.run_at,
                         static_cast<std::int64_t>(job.delay.count()), job.priority, job.max_attempts)[0]
      .as<std::int64_t>();
}

std::int64_t Store::enqueue_prepared(pqxx::transaction_base& tx, const NewJob& job) const {
  validate_new_job(job);
  return run(tx, enqueue_, job.kind, payload_text(job), job.queue, job.idempotency_key, job.run_at,
             static_cast<std::int64_t>(job.delay.count()), job.priority, job.max_attempts)
      .at(0)
      .at(0)
      .as<std::int64_t>();
}

namespace {

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
    jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace

std::vector<ClaimedJob> Store::claim(pqxx::transaction_base& tx, std::string_view queue, int limit,
                                     const TransactionLimits& limits, const std::optional<ClaimKey>& after) const {
  return claimed_jobs(run(tx, claim_, std::string(queue), limit, limits.statement_timeout,
                          limits.idle_in_transaction_session_timeout, limits.client_connection_check_interval,
                          after ? std::optional<int>(after->priority) : std::nullopt,
                          after ? std::optional<std::int64_t>(after->run_at_us) : std::nullopt,
                          after ? std::optional<std::int64_t>(after->id) : std::nullopt));
}

std::vector<std::int64_t> Store::lock_ready(pqxx::transaction_base& tx, std::string_view queue, int limit) const {
  std::vector<std::int64_t> ids;
  for (const auto& row : run(tx, lock_ready_, std::string(queue), limit)) ids.push_back(row[0].as<std::int64_t>());
  return ids;
}

std::vector<ClaimedJob> Store::claim_by_id(pqxx::transaction_base& tx, std::int64_t id,
                                           const TransactionLimits& limits) const {
  return claimed_jobs(run(tx, claim_by_id_, id, 1, limits.statement_timeout,
                          limits.idle_in_transaction_session_timeout, limits.client_connection_check_interval));
}

std::vector<std::pair<std::int64_t, int>> Store::fold_interrupted(
    pqxx::transaction_base& tx, const std::vector<std::pair<std::int64_t, int>>& jobs, std::int64_t own_slot) const {
  std::vector<std::int64_t> ids;
  std::vector<int> counts;
  for (const auto& [id, n] : jobs) {
    ids.push_back(id);
    counts.push_back(n);
  }
  std::vector<std::pair<std::int64_t, int>> attempts;
  for (const auto& row :
       run(tx, fold_interrupted_, to_array_literal(ids), to_array_literal(counts), own_slot, std::string(kInterruptedError))) {
    attempts.emplace_back(row[0].as<std::int64_t>(), row[1].as<int>());
  }
  return attempts;
}

void Store::complete_batch(pqxx::transaction_base& tx, const std::vector<std::int64_t>& finished_ids,
                           const std::vector<std::string>& released_markers, std::int64_t slot, std::string_view queue,
                           const OutcomeCounts& c) const {
  run(tx, complete_batch_, to_array_literal(finished_ids), to_array_literal(released_markers), slot, std::string(queue),
      c.completed, c.deduplicated, c.retried, c.dead_lettered, c.crashed, c.run_time_us);
}

void Store::count_outcomes(pqxx::transaction_base& tx, std::int64_t slot, std::string_view queue,
                           const OutcomeCounts& c) const {
  run(tx, count_outcomes_, slot, std::string(queue), c.completed, c.deduplicated, c.retried, c.dead_lettered,
      c.crashed, c.run_time_us);
}

void Store::retry_job(pqxx::transaction_base& tx, const FailureRecord& f, std::chrono::milliseconds delay) const {
  run(tx, retry_job_, f.job_id, f.marker, f.attempts, f.error, f.attempt_class,
      static_cast<std::int64_t>(delay.count()));
}

void Store::dead_letter_job(pqxx::transaction_base& tx, const FailureRecord& f) const {
  run(tx, dead_letter_job_, f.job_id, f.marker, f.attempts, f.error, f.attempt_class, f.dead_letter_class,
      f.detail.dump());
}

void Store::dead_letter_unclaimed(pqxx::transaction_base& tx, std::int64_t id, const std::string& error,
                                  const std::string& dead_letter_class, const nlohmann::json& detail) const {
  run(tx, dead_letter_job_, id, std::optional<std::string>(), std::optional<int>(), error, std::optional<std::string>(),
      dead_letter_class, detail.dump());
}

bool Store::relock_job(pqxx::transaction_base& tx, std::int64_t id, int seen_attempts) const {
  return !run(tx, relock_job_, id, seen_attempts).empty();
}

std::int64_t Store::create_slot(pqxx::transaction_base& tx, std::int64_t worker_id) const {
  return run(tx, create_slot_, worker_id).at(0).at(0).as<std::int64_t>();
}

std::vector<UnfinishedAttempts> Store::record_attempts(pqxx::transaction_base& tx, std::int64_t slot,
                                                       std::int64_t worker_id,
                                                       const std::vector<std::int64_t>& job_ids,
                                                       int job_backend_pid, bool exclusive) const {
  std::vector<UnfinishedAttempts> unfinished;
  for (const auto& row :
       run(tx, record_attempts_, slot, to_array_literal(job_ids), worker_id, job_backend_pid, exclusive)) {
    unfinished.push_back({row[0].as<std::int64_t>(), row[1].as<int>(), row[2].as<int>()});
  }
  return unfinished;
}

void Store::clear_slot(pqxx::transaction_base& tx, std::int64_t slot) const { run(tx, clear_slot_, slot); }
void Store::narrow_slot(pqxx::transaction_base& tx, std::int64_t slot, const std::vector<std::int64_t>& started) const {
  run(tx, narrow_slot_, slot, to_array_literal(started));
}
void Store::delete_slot(pqxx::transaction_base& tx, std::int64_t slot) const { run(tx, delete_slot_, slot); }

std::int64_t Store::register_worker(pqxx::transaction_base& tx, const std::string& host, int pid,
                                    const std::vector<std::string>& queues) const {
  return run(tx, register_worker_, host, pid, to_array_literal(queues)).at(0).at(0).as<std::int64_t>();
}

void Store::heartbeat(pqxx::transaction_base& tx, std::int64_t worker_id, int jobs_in_flight, const std::string& host,
                      int pid, const std::vector<std::string>& queues) const {
  run(tx, heartbeat_, worker_id, jobs_in_flight, host, pid, to_array_literal(queues));
}

void Store::unregister_worker(pqxx::transaction_base& tx, std::int64_t worker_id) const {
  run(tx, unregister_worker_, worker_id);
}

void Store::remove_stale_workers(pqxx::transaction_base& tx, std::chrono::milliseconds stale_after) const {
  run(tx, remove_stale_workers_, static_cast<std::int64_t>(stale_after.count()));
}

bool Store::try_metrics_leadership(pqxx::transaction_base& tx) const {
  return run(tx, try_metrics_leadership_, schema_).at(0).at(0).as<bool>();
}

bool Store::try_maintenance_lock(pqxx::transaction_base& tx) const {
  return run(tx, try_maintenance_lock_, schema_).at(0).at(0).as<bool>();
}

long Store::prune_markers(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const {
  return static_cast<long>(run(tx, prune_markers_, static_cast<std::int64_t>(window.count()), limit).affected_rows());
}

long Store::prune_stats(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const {
  return static_cast<long>(run(tx, prune_stats_, static_cast<std::int64_t>(window.count()), limit).affected_rows());
}

int Store::schema_version(pqxx::transaction_base& tx) const {
  return run(tx, schema_version_).at(0).at(0).as<int>();
}

}  // namespace oncely::detail
