-- Least-privilege group roles for one oncely schema, applied by `oncely migrate --roles`
-- (and again by every `oncely migrate` that applies a migration while the roles exist).
--
-- :ONCELY_SCHEMA is the quoted schema name; :PRODUCER_ROLE, :WORKER_ROLE, :OPERATOR_ROLE and
-- :VIEWER_ROLE are the quoted names "<schema>_producer", ... The roles are NOLOGIN groups: a
-- DBA grants them to login roles (GRANT oncely_worker TO billing_worker).
--
-- The file converges: it creates a role only when it is missing, then revokes everything the
-- four roles hold on the schema's objects and grants exactly what is below, all in the
-- migrator's one transaction. A privilege granted to one of these roles by hand is revoked on
-- the next run; grant it to the login role instead.
--
-- No default privileges: a default would hand a future table's every column (a payload
-- too) to a role before anyone decided it should. A migration that adds a table or a column
-- is followed by this file instead (`oncely migrate` re-applies it when it applies a migration).

-- 1. The roles. CREATE ROLE has no IF NOT EXISTS, and roles are shared by every database of
-- the cluster: a role another database's migrate created a moment ago is fine too.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = ':PRODUCER_NAME') THEN
    CREATE ROLE :PRODUCER_ROLE NOLOGIN;
  END IF;
EXCEPTION WHEN duplicate_object THEN NULL;
END
$$;
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = ':WORKER_NAME') THEN
    CREATE ROLE :WORKER_ROLE NOLOGIN;
  END IF;
EXCEPTION WHEN duplicate_object THEN NULL;
END
$$;
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = ':OPERATOR_NAME') THEN
    CREATE ROLE :OPERATOR_ROLE NOLOGIN;
  END IF;
EXCEPTION WHEN duplicate_object THEN NULL;
END
$$;
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = ':VIEWER_NAME') THEN
    CREATE ROLE :VIEWER_ROLE NOLOGIN;
  END IF;
EXCEPTION WHEN duplicate_object THEN NULL;
END
$$;

-- 2. Start from nothing. Revoking a table privilege revokes its column privileges too.
REVOKE ALL ON SCHEMA :ONCELY_SCHEMA FROM :PRODUCER_ROLE, :WORKER_ROLE, :OPERATOR_ROLE, :VIEWER_ROLE;
REVOKE ALL ON ALL TABLES IN SCHEMA :ONCELY_SCHEMA FROM :PRODUCER_ROLE, :WORKER_ROLE, :OPERATOR_ROLE, :VIEWER_ROLE;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA :ONCELY_SCHEMA FROM :PRODUCER_ROLE, :WORKER_ROLE, :OPERATOR_ROLE, :VIEWER_ROLE;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA :ONCELY_SCHEMA FROM :PRODUCER_ROLE, :WORKER_ROLE, :OPERATOR_ROLE, :VIEWER_ROLE;

-- Every role names the schema's objects; none may create any (no CREATE: no DDL).
GRANT USAGE ON SCHEMA :ONCELY_SCHEMA TO :PRODUCER_ROLE, :WORKER_ROLE, :OPERATOR_ROLE, :VIEWER_ROLE;

-- 3. Producer: enqueue only.
-- The columns a job is enqueued with; attempts, errors, last_error, created_at, the lease
-- and origin_job_id are not among them, so a producer cannot write a job's history (the
-- check trigger of version 6 refuses that for every role; here it is refused sooner). id is:
-- a batch enqueue reserves its ids with nextval() first, and the check trigger refuses an id
-- the sequence did not hand out.
GRANT INSERT (id, queue, kind, payload, idempotency_key, priority, run_at, max_attempts, trace_context, unique_key,
              concurrency_key, depends_on, batch_id)
  ON :ONCELY_SCHEMA.jobs TO :PRODUCER_ROLE;
-- INSERT ... RETURNING id reads the id back; no other column of any job (payloads included).
GRANT SELECT (id) ON :ONCELY_SCHEMA.jobs TO :PRODUCER_ROLE;
-- nextval() for the ids a batch enqueue reserves (the identity default itself needs nothing).
GRANT USAGE ON SEQUENCE :ONCELY_SCHEMA.jobs_id_seq TO :PRODUCER_ROLE;
-- enqueue() runs as its caller; enqueue_unique() as the owner (SECURITY DEFINER, version 11),
-- so that replacing a pending unique job needs no UPDATE on jobs.
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.enqueue(text, jsonb, text, text, timestamptz, integer, integer, text, text, bigint[],
                                                         bigint, text),
                          :ONCELY_SCHEMA.enqueue_unique(text, jsonb, text, text, timestamptz, integer, integer, text, text)
  TO :PRODUCER_ROLE;
-- Batches (migration 24): opened and closed through these (SECURITY DEFINER), members joined by
-- their batch_id column.
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.open_batch(jsonb, jsonb, jsonb), :ONCELY_SCHEMA.close_batch(bigint)
  TO :PRODUCER_ROLE, :WORKER_ROLE, :OPERATOR_ROLE;

-- 4. Worker: what `oncely worker` runs, nothing more. No DELETE of dead letters, no replay,
-- no pause: those are the operator's.
-- The claim reads whole jobs (payloads); a completion, a duplicate or a dead-letter move
-- deletes them; a retry, a crash fold or a lease writes these columns.
GRANT SELECT, DELETE ON :ONCELY_SCHEMA.jobs TO :WORKER_ROLE;
GRANT UPDATE (attempts, last_error, errors, run_at, lease_token, leased_by, lease_holder, leased_at) ON :ONCELY_SCHEMA.jobs
  TO :WORKER_ROLE;
-- Cron enqueues, and handlers enqueue through their JobContext: a producer's columns.
GRANT INSERT (id, queue, kind, payload, idempotency_key, priority, run_at, max_attempts, trace_context, unique_key,
              concurrency_key, depends_on, batch_id)
  ON :ONCELY_SCHEMA.jobs TO :WORKER_ROLE;
GRANT USAGE ON SEQUENCE :ONCELY_SCHEMA.jobs_id_seq TO :WORKER_ROLE;
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.enqueue(text, jsonb, text, text, timestamptz, integer, integer, text, text, bigint[],
                                                         bigint, text),
                          :ONCELY_SCHEMA.enqueue_unique(text, jsonb, text, text, timestamptz, integer, integer, text, text)
  TO :WORKER_ROLE;
-- Lease fencing tokens (nextval in the lease claim).
GRANT USAGE ON SEQUENCE :ONCELY_SCHEMA.lease_tokens TO :WORKER_ROLE;
-- A thread's slot id (the key of its job_stats rows).
GRANT USAGE ON SEQUENCE :ONCELY_SCHEMA.attempt_slots TO :WORKER_ROLE;
-- Dedup markers: inserted by the claim, deleted by a retry and by maintenance's pruning; a
-- transaction-mode batch's completion row holds the rest of its jobs' records (migration 27).
GRANT SELECT, INSERT, DELETE ON :ONCELY_SCHEMA.processed_jobs, :ONCELY_SCHEMA.transaction_completions
  TO :WORKER_ROLE;
-- The dead-letter move writes a new dead letter (not its id, nor a replay); the metrics
-- count dead letters by queue and age, without reading a payload.
GRANT INSERT (job_id, queue, kind, payload, idempotency_key, priority, attempts, max_attempts, last_error, error_class,
              errors, error_detail, created_at, origin_job_id, failed_at, trace_context, depends_on, batch_id)
  ON :ONCELY_SCHEMA.dead_letters TO :WORKER_ROLE;
GRANT SELECT (queue, failed_at, replayed_at) ON :ONCELY_SCHEMA.dead_letters TO :WORKER_ROLE;
-- The worker's own bookkeeping: its registry row and heartbeat, its threads' attempt
-- records, per-minute outcome counts (and their pruning), the batch commit guard, and the
-- leases that elect one process for the metrics' database gauges (taken, renewed, given up).
GRANT SELECT, INSERT, UPDATE, DELETE ON :ONCELY_SCHEMA.workers, :ONCELY_SCHEMA.attempts_in_flight,
                                        :ONCELY_SCHEMA.job_stats, :ONCELY_SCHEMA.leaders TO :WORKER_ROLE;
GRANT SELECT, INSERT, DELETE ON :ONCELY_SCHEMA.commit_guards TO :WORKER_ROLE;
-- Cron slots advance (insert or update, never delete).
GRANT SELECT, INSERT, UPDATE ON :ONCELY_SCHEMA.cron_slots TO :WORKER_ROLE;
-- The listener acknowledges the wake-ups that reached it (the insert trigger's window).
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.wakeup_received() TO :WORKER_ROLE;
-- The SQL worker protocol (migrations 18 and 20), and what its functions call: they run as their
-- caller, with the privileges above.
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.lease_jobs(text, integer, interval, text),
                          :ONCELY_SCHEMA.complete_job(bigint, bigint, jsonb),
                          :ONCELY_SCHEMA.complete_jobs(bigint[], bigint[]),
                          :ONCELY_SCHEMA.complete_jobs(bigint[], bigint[], text[]),
                          :ONCELY_SCHEMA.fail_job(bigint, bigint, text, boolean, interval, jsonb),
                          :ONCELY_SCHEMA.renew_leases(bigint[], interval),
                          :ONCELY_SCHEMA.release_jobs(bigint[]),
                          :ONCELY_SCHEMA.queue_policy(text),
                          :ONCELY_SCHEMA.retry_delay(:ONCELY_SCHEMA.queue_policies, integer),
                          :ONCELY_SCHEMA.lease_lock_ready(text, integer, smallint, bigint, bigint),
                          :ONCELY_SCHEMA.lease_lock_in_order(text, integer, smallint, bigint, bigint),
                          :ONCELY_SCHEMA.queue_keys(text),
                          :ONCELY_SCHEMA.ready_by_key(text, integer, jsonb),
                          :ONCELY_SCHEMA.lock_ready_limited(text, integer, bigint[], interval),
                          :ONCELY_SCHEMA.rate_window(timestamptz[], timestamptz, integer),
                          :ONCELY_SCHEMA.limits_retry_in(text),
                          :ONCELY_SCHEMA.lease_locked(bigint[], bigint, text, bigint, integer, text),
                          :ONCELY_SCHEMA.dead_letter_job(bigint, integer, text, text, text, jsonb),
                          :ONCELY_SCHEMA.count_protocol_outcome(text, bigint, bigint, bigint, bigint, bigint)
  TO :WORKER_ROLE;
-- Handler-side completion (migration 18): complete_job() leaves a C++ worker's token, which
-- its worker reads and deletes.
GRANT SELECT, INSERT, DELETE ON :ONCELY_SCHEMA.lease_completions TO :WORKER_ROLE;
-- A worker started with --config writes its queues' policies.
GRANT SELECT, INSERT, UPDATE ON :ONCELY_SCHEMA.queue_policies TO :WORKER_ROLE;
-- Read only: which queues are paused, and the schema version checked at start-up.
GRANT SELECT ON :ONCELY_SCHEMA.queue_pauses, :ONCELY_SCHEMA.schema_migrations TO :WORKER_ROLE;
-- A queue's limits (migration 22): read by the lease claim; written, with the keys of the
-- queue's jobs, by set_queue_limits() (SECURITY DEFINER) for a worker started with --config.
GRANT SELECT ON :ONCELY_SCHEMA.queue_limits TO :WORKER_ROLE;
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.set_queue_limits(text, integer, text, integer, integer, interval, integer,
                                                          interval) TO :WORKER_ROLE;
-- The rate windows (migration 23): the lease claim records its starts there, and a
-- maintenance pass deletes the windows of keys idle for a period.
GRANT SELECT, INSERT, UPDATE ON :ONCELY_SCHEMA.queue_rate_windows TO :WORKER_ROLE;
GRANT SELECT, INSERT, UPDATE, DELETE ON :ONCELY_SCHEMA.key_rate_windows TO :WORKER_ROLE;

-- 5. Operator: dlq, jobs, queue, stats, check, cron list, and the console's actions.
-- Reads everything, payloads included (dlq show, jobs show).
GRANT SELECT ON ALL TABLES IN SCHEMA :ONCELY_SCHEMA TO :OPERATOR_ROLE;
-- dlq replay: marks the dead letter replayed and enqueues its job under an id taken with
-- nextval() first (so the dead letter names it in the same statement).
GRANT UPDATE (replayed_at, replayed_job_id) ON :ONCELY_SCHEMA.dead_letters TO :OPERATOR_ROLE;
GRANT INSERT (id, queue, kind, payload, idempotency_key, priority, max_attempts, origin_job_id, trace_context,
              depends_on)
  ON :ONCELY_SCHEMA.jobs TO :OPERATOR_ROLE;
GRANT USAGE ON SEQUENCE :ONCELY_SCHEMA.jobs_id_seq TO :OPERATOR_ROLE;
-- dlq purge.
GRANT DELETE ON :ONCELY_SCHEMA.dead_letters TO :OPERATOR_ROLE;
-- jobs cancel: locks the jobs (FOR UPDATE needs UPDATE on one column: run_at, which moves
-- nothing but the time a job runs), deletes them and their markers, and dead-letters them.
GRANT UPDATE (run_at), DELETE ON :ONCELY_SCHEMA.jobs TO :OPERATOR_ROLE;
GRANT DELETE ON :ONCELY_SCHEMA.processed_jobs TO :OPERATOR_ROLE;
-- The dead letter is the dead-letter move's (dead_letter_insert_sql): the worker's columns.
GRANT INSERT (job_id, queue, kind, payload, idempotency_key, priority, attempts, max_attempts, last_error, error_class,
              errors, error_detail, created_at, origin_job_id, failed_at, trace_context, depends_on, batch_id)
  ON :ONCELY_SCHEMA.dead_letters TO :OPERATOR_ROLE;
-- queue pause and resume.
GRANT INSERT (queue, reason, paused_by), DELETE ON :ONCELY_SCHEMA.queue_pauses TO :OPERATOR_ROLE;
-- queue set: a queue's policy (migration 18); queue_policy() reads one with its defaults.
GRANT INSERT, UPDATE ON :ONCELY_SCHEMA.queue_policies TO :OPERATOR_ROLE;
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.queue_policy(text) TO :OPERATOR_ROLE;
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.set_queue_limits(text, integer, text, integer, integer, interval, integer,
                                                          interval) TO :OPERATOR_ROLE;
-- jobs cancel moves each job with the dead-letter move (the privileges above).
GRANT EXECUTE ON FUNCTION :ONCELY_SCHEMA.dead_letter_job(bigint, integer, text, text, text, jsonb) TO :OPERATOR_ROLE;

-- 6. Viewer: stats, check and the console's read-only pages. Every column of every table
-- but the payloads of jobs and dead letters, the outputs of completed jobs, and the callbacks
-- of batches (job descriptions, payload included); the columns are read from the catalog, so a column a later migration
-- adds is granted too.
GRANT SELECT ON ALL TABLES IN SCHEMA :ONCELY_SCHEMA TO :VIEWER_ROLE;
REVOKE SELECT ON :ONCELY_SCHEMA.jobs, :ONCELY_SCHEMA.dead_letters, :ONCELY_SCHEMA.batches, :ONCELY_SCHEMA.processed_jobs,
                 :ONCELY_SCHEMA.transaction_completions, :ONCELY_SCHEMA.completed_jobs
  FROM :VIEWER_ROLE;
DO $$
DECLARE
  t record;
BEGIN
  FOR t IN
    SELECT c.relname, string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) AS columns
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
     WHERE c.relnamespace = ':ONCELY_SCHEMA'::regnamespace
       AND ((c.relname IN ('jobs', 'dead_letters') AND a.attname <> 'payload')
            OR (c.relname IN ('processed_jobs', 'completed_jobs') AND a.attname <> 'output')
            OR (c.relname = 'transaction_completions' AND a.attname <> 'outputs')
            OR (c.relname = 'batches' AND a.attname NOT IN ('on_success', 'on_failure', 'on_finish')))
     GROUP BY c.relname
  LOOP
    EXECUTE format('GRANT SELECT (%s) ON :ONCELY_SCHEMA.%I TO :VIEWER_ROLE', t.columns, t.relname);
  END LOOP;
END
$$;
