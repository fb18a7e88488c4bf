-- oncely schema, version 1: jobs, dedup markers, dead letters, enqueue(), wake-up trigger.
-- :ONCELY_SCHEMA is replaced by the quoted schema name when `oncely migrate` applies this file.

-- Pending, scheduled and retrying work. A row exists until its job completes (the row is
-- deleted in the job's own transaction), is found to be a duplicate, or is dead-lettered.
CREATE TABLE :ONCELY_SCHEMA.jobs (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue           text        NOT NULL DEFAULT 'default',
  kind            text        NOT NULL,
  payload         jsonb       NOT NULL DEFAULT '{}',
  idempotency_key text,
  priority        smallint    NOT NULL DEFAULT 0,
  run_at          timestamptz NOT NULL DEFAULT now(),
  attempts        integer     NOT NULL DEFAULT 0,
  max_attempts    integer,
  last_error      text,
  errors          jsonb       NOT NULL DEFAULT '[]',
  created_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT jobs_queue_not_empty CHECK (queue <> ''),
  CONSTRAINT jobs_kind_not_empty CHECK (kind <> ''),
  -- An empty key is almost always a producer bug, and it would make every such job a
  -- duplicate of the first: reject it rather than silently skip work.
  CONSTRAINT jobs_idempotency_key_not_empty CHECK (idempotency_key <> ''),
  CONSTRAINT jobs_attempts_not_negative CHECK (attempts >= 0),
  CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts >= 1),
  CONSTRAINT jobs_errors_is_array CHECK (jsonb_typeof(errors) = 'array')
) WITH (
  -- A queue table churns: every job is inserted once and deleted once. Vacuum it after a
  -- fixed number of dead rows rather than a fraction of a table whose size swings from
  -- zero to millions, and let that vacuum run without cost-based sleeps, so dead index
  -- entries at the head of the claim index are reclaimed before they slow the claim scan.
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0,
  autovacuum_analyze_threshold = 10000,
  autovacuum_vacuum_cost_delay = 0
);

-- Serves the claim: WHERE queue = $1 AND run_at <= now() ORDER BY priority, run_at, id.
CREATE INDEX jobs_claim_idx ON :ONCELY_SCHEMA.jobs (queue, priority, run_at, id);

-- Dedup markers: one row per processed job, inserted in the job's own transaction.
-- A keyed job is deduplicated by (kind, idempotency_key). A job without a key is its own
-- key: its marker keeps idempotency_key NULL (so a producer's key "42" never collides with
-- job id 42) and job_id identifies it; a job id is never reused and its row is deleted in
-- the same transaction, so such a job cannot be applied twice.
CREATE TABLE :ONCELY_SCHEMA.processed_jobs (
  kind            text        NOT NULL,
  idempotency_key text,
  job_id          bigint      NOT NULL,
  queue           text        NOT NULL,
  processed_at    timestamptz NOT NULL DEFAULT now()
) WITH (
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 100000
);
CREATE UNIQUE INDEX processed_jobs_key_idx ON :ONCELY_SCHEMA.processed_jobs (kind, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
-- Pruning past the dedup window scans by age; rows arrive in time order, so BRIN is enough.
CREATE INDEX processed_jobs_processed_at_idx ON :ONCELY_SCHEMA.processed_jobs USING brin (processed_at);

-- Jobs that gave up, with everything needed to debug and replay them.
CREATE TABLE :ONCELY_SCHEMA.dead_letters (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id          bigint      NOT NULL,
  queue           text        NOT NULL,
  kind            text        NOT NULL,
  payload         jsonb       NOT NULL,
  idempotency_key text,
  priority        smallint    NOT NULL,
  attempts        integer     NOT NULL,
  max_attempts    integer,
  last_error      text,
  error_class     text        NOT NULL,
  errors          jsonb       NOT NULL DEFAULT '[]',
  error_detail    jsonb       NOT NULL DEFAULT '{}',
  created_at      timestamptz NOT NULL,
  failed_at       timestamptz NOT NULL DEFAULT now(),
  replayed_at     timestamptz,
  replayed_job_id bigint,
  CONSTRAINT dead_letters_error_class_not_empty CHECK (error_class <> ''),
  CONSTRAINT dead_letters_replay_complete CHECK ((replayed_at IS NULL) = (replayed_job_id IS NULL))
);
CREATE INDEX dead_letters_queue_failed_at_idx ON :ONCELY_SCHEMA.dead_letters (queue, failed_at);
CREATE INDEX dead_letters_failed_at_idx ON :ONCELY_SCHEMA.dead_letters (failed_at);

-- The same as a plain INSERT into jobs, for callers that prefer a function; returns the id.
-- priority is an integer parameter so that a bare literal (enqueue(..., 5)) resolves.
CREATE FUNCTION :ONCELY_SCHEMA.enqueue(
  kind            text,
  payload         jsonb       DEFAULT '{}',
  queue           text        DEFAULT 'default',
  idempotency_key text        DEFAULT NULL,
  run_at          timestamptz DEFAULT NULL,
  priority        integer     DEFAULT 0,
  max_attempts    integer     DEFAULT NULL
) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  INSERT INTO :ONCELY_SCHEMA.jobs (kind, payload, queue, idempotency_key, run_at, priority, max_attempts)
  VALUES ($1, coalesce($2, '{}'), coalesce($3, 'default'), $4, coalesce($5, now()),
          coalesce($6, 0)::smallint, $7)
  RETURNING id
$$;

-- Wakes idle workers: one NOTIFY per INSERT statement (not per row), on the channel
-- '<schema>.jobs', whose payload lists the queues that received a job that is ready now.
-- Jobs scheduled for later are found by the workers' polling.
CREATE FUNCTION :ONCELY_SCHEMA.notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  ready_queues text;
BEGIN
  SELECT string_agg(q.queue, ',') INTO ready_queues
    FROM (SELECT DISTINCT queue FROM inserted_jobs WHERE run_at <= now()) AS q;
  IF ready_queues IS NOT NULL THEN
    -- A NOTIFY payload is limited to 8000 bytes; '*' asks every pool to look.
    IF octet_length(ready_queues) > 7000 THEN
      ready_queues := '*';
    END IF;
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.jobs', ready_queues);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_inserted
  AFTER INSERT ON :ONCELY_SCHEMA.jobs
  REFERENCING NEW TABLE AS inserted_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :ONCELY_SCHEMA.notify_jobs_inserted();
