-- oncely schema, version 27: the dedup marker becomes the completed job's record
-- (docs/history.md).
--
-- A completed job left only its marker: its key, job id and queue. It now says too when
-- the job completed, on which attempt, how long its handler ran, on which worker, in which
-- trace, and what the handler returned (its output, JSON of at most 64 KiB). The record is
-- kept as long as the marker is, for the dedup window, and pruned with it.
--
-- Who writes it: in lease mode, and for the SQL worker protocol, the fenced completion
-- (complete_leases(), the one owner of that rule) inserts the marker whole. In transaction
-- mode the claim inserts the marker before the handlers run (it is the dedup lock), naming
-- its transaction; the batch's completion then writes one row for the whole batch
-- (transaction_completions: when, on which worker, and each job's attempt, run time, trace
-- and output), in the COMMIT that makes the work permanent. Rewriting each marker instead
-- (an UPDATE per job) cost the no-op burn-down 0.72× of its throughput; a row per batch of
-- up to 500 jobs costs nothing measurable. completed_jobs, a view, reads both as one.
--
-- Existing installations: adding nullable columns without a default rewrites nothing, and
-- the job-id index is built under a SHARE lock, which holds back completions (not claims
-- of queued jobs in lease mode, which do not insert markers) while it builds: measured in
-- docs/history.md. Markers written before this version have no completion time (their
-- processed_at is shown) and none of the new details.

-- 1. The record's columns. completed_at: when the completing transaction's statement ran
-- (processed_at stays the marker's insert time, the claim's in transaction mode, which the
-- dedup window's pruning and its BRIN index go by).
ALTER TABLE :ONCELY_SCHEMA.processed_jobs
  ADD COLUMN completed_at    timestamptz,
  ADD COLUMN attempt         integer,
  ADD COLUMN run_time        interval,
  ADD COLUMN worker          text,
  ADD COLUMN trace_id        text,
  ADD COLUMN output          jsonb,
  -- A transaction-mode marker: the claim's transaction, whose completion row holds the rest.
  ADD COLUMN completion_xact xid8;

-- A transaction-mode batch's completion, one row per committed batch: the details of its
-- completed jobs by position (job_ids[i] is the job of attempts[i], run_us[i], ...). Kept as
-- long as the markers, pruned with them.
CREATE TABLE :ONCELY_SCHEMA.transaction_completions (
  xact         xid8        PRIMARY KEY,
  completed_at timestamptz NOT NULL,
  worker       text        NOT NULL,
  job_ids      bigint[]    NOT NULL,
  attempts     integer[]   NOT NULL,
  run_us       bigint[]    NOT NULL,
  trace_ids    text[]      NOT NULL,
  outputs      jsonb[]     NOT NULL
) WITH (
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 10000
);
CREATE INDEX transaction_completions_completed_at_idx ON :ONCELY_SCHEMA.transaction_completions
  USING brin (completed_at);

-- `oncely jobs show --id` and `jobs list --state completed` (newest first, keyset paging by
-- id): one ordered index. The completions append at its right edge, as the ids ascend.
CREATE INDEX processed_jobs_job_id_idx ON :ONCELY_SCHEMA.processed_jobs (job_id);

-- 2. When a lease was taken: a protocol worker's run time is its completion's time less
-- this (a C++ worker passes the handler's own). lease_locked() of version 24 sets it with
-- the lease.
ALTER TABLE :ONCELY_SCHEMA.jobs ADD COLUMN leased_at timestamptz;
DO $$
DECLARE
  lease_locked constant regprocedure :=
    ':ONCELY_SCHEMA.lease_locked(bigint[], bigint, text, bigint, integer, text)'::regprocedure;
BEGIN
  EXECUTE replace(pg_get_functiondef(lease_locked), 'lease_holder = $3,', 'lease_holder = $3, leased_at = now(),');
  IF pg_get_functiondef(lease_locked) NOT LIKE '%leased_at = now()%' THEN
    RAISE EXCEPTION 'migration 27: lease_locked() is not the version 24 function it expects';
  END IF;
END
$$;

-- 3. The one check of an output's size, by every SQL entry point: NULL when `bytes` of JSON
-- text may be kept, else why not. The C++ runtime checks the same limit where a handler
-- hands its output over (JobContext::set_output).
CREATE FUNCTION :ONCELY_SCHEMA.output_refusal(bytes bigint)
RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE WHEN $1 > 65536
              THEN format('output is %s bytes of JSON, over the limit of 65536 (64 KiB)', $1) END
$$;

-- 4. The fenced completion, now writing the whole record. outputs, run_times and trace_ids
-- go with ids by position (NULL or shorter: none); worker names the completing process
-- (NULL: the lease's holder, as lease_jobs() was told). A trace id not given is the job's
-- own (its trace context's). A signature of its own, without defaults: the version-21 one
-- stays (below) for the workers of an older oncely that run on while this lands.
CREATE FUNCTION :ONCELY_SCHEMA.complete_leases(ids bigint[], tokens bigint[], outputs jsonb[], run_times interval[],
                                               trace_ids text[], worker text)
RETURNS TABLE (id bigint, kind text, idempotency_key text, queue text, leased_by bigint, lease_token bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
    WITH pairs AS (
      SELECT * FROM unnest($1, $2, $3, $4, $5) AS h(id, token, output, run_time, trace_id) WHERE h.id IS NOT NULL
    ), done AS (
      DELETE FROM :ONCELY_SCHEMA.jobs j USING pairs h
       WHERE j.id = h.id AND j.lease_token = h.token
      RETURNING j.id, j.kind, j.idempotency_key, j.queue, j.leased_by, j.lease_token, j.attempts, j.lease_holder,
                j.leased_at, j.trace_context, h.output, h.run_time, h.trace_id
    ), markers AS (
      INSERT INTO :ONCELY_SCHEMA.processed_jobs (kind, idempotency_key, job_id, queue, completed_at, attempt, run_time,
                                                 worker, trace_id, output)
      SELECT d.kind, d.idempotency_key, d.id, d.queue, statement_timestamp(), d.attempts,
             coalesce(d.run_time, statement_timestamp() - d.leased_at), coalesce($6, d.lease_holder),
             coalesce(d.trace_id, substr(d.trace_context, 4, 32)), d.output
        FROM done d ORDER BY d.kind, d.idempotency_key
      ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    )
    SELECT d.id, d.kind, d.idempotency_key, d.queue, d.leased_by, d.lease_token FROM done d;
  -- Every pair: those not completed here are still queued (or were settled, with what they
  -- owed, by whoever settled them), which settle_dependents() passes over.
  PERFORM :ONCELY_SCHEMA.settle_dependents($1, 'completed');
END
$$;

-- The version-21 signature, as the workers of an older oncely call it until they restart:
-- the completion above, with nothing more to record than they knew.
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.complete_leases(ids bigint[], tokens bigint[])
RETURNS TABLE (id bigint, kind text, idempotency_key text, queue text, leased_by bigint, lease_token bigint)
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT * FROM :ONCELY_SCHEMA.complete_leases($1, $2, NULL, NULL, NULL, NULL)
$$;

-- 5. complete_job() as in version 19, keeping its output (the argument it always had).
-- Errors as before, and 54000 for an output over 64 KiB (nothing is done: roll back and fail
-- the job permanently with the message, as the reference workers do).
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.complete_job(id bigint, lease_token bigint, output jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  done record;
  refusal text := :ONCELY_SCHEMA.output_refusal(octet_length($3::text));
BEGIN
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'complete_job: id and lease_token must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF refusal IS NOT NULL THEN
    RAISE EXCEPTION 'complete_job: job %: %', $1, refusal
      USING ERRCODE = 'program_limit_exceeded', HINT = 'Fail the job (it cannot complete with this output).';
  END IF;
  SELECT c.* INTO done FROM :ONCELY_SCHEMA.complete_leases(ARRAY[$1], ARRAY[$2], ARRAY[$3], NULL, NULL, NULL) c;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'complete_job: job % does not hold lease %: it expired and was taken, was released, or the job was settled',
                    $1, $2
      USING ERRCODE = 'OC101', HINT = 'Roll back: another attempt owns the job now.';
  END IF;
  -- The job's key is ours only if the marker is this job's: another copy's completion
  -- (or claim) that came first kept its own.
  IF done.idempotency_key IS NOT NULL
     AND NOT EXISTS (SELECT FROM :ONCELY_SCHEMA.processed_jobs p
                      WHERE p.kind = done.kind AND p.idempotency_key = done.idempotency_key AND p.job_id = done.id) THEN
    RAISE EXCEPTION 'complete_job: the key of job % (kind %) was processed already', $1, quote_literal(done.kind)
      USING ERRCODE = 'OC102', HINT = 'Roll back and release the job: its next claim deletes it as a duplicate.';
  END IF;
  IF done.leased_by IS NOT NULL THEN
    -- A C++ worker's exec or http handler: its worker counts the completion.
    INSERT INTO :ONCELY_SCHEMA.lease_completions (lease_token, job_id) VALUES ($2, done.id);
  ELSE
    PERFORM :ONCELY_SCHEMA.count_protocol_outcome(done.queue, 1, 0, 0, 0);
  END IF;
END
$$;

-- 6. complete_jobs() of version 20 with the jobs' outputs: JSON texts by position (NULL or
-- shorter: none). Text, not jsonb, so that the limit is measured on the bytes the caller
-- sent, which it can measure itself first; one over the limit is refused (54000) before
-- anything is done. The version-20 signature stays, for callers without outputs (below).
CREATE FUNCTION :ONCELY_SCHEMA.complete_jobs(ids bigint[], lease_tokens bigint[], outputs text[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  done_ids bigint[];
  done_queues text[];
  by_cpp_worker boolean[];
  refused record;
BEGIN
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'complete_jobs: ids and lease_tokens must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF cardinality($1) <> cardinality($2) OR cardinality($3) > cardinality($1) THEN
    RAISE EXCEPTION 'complete_jobs: % ids, % lease tokens and % outputs', cardinality($1), cardinality($2),
                    coalesce(cardinality($3), 0)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF cardinality($1) > 10000 THEN
    RAISE EXCEPTION 'complete_jobs: % jobs in one call; at most 10000', cardinality($1)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT o.i, :ONCELY_SCHEMA.output_refusal(octet_length(o.output)) AS why INTO refused
    FROM unnest($3) WITH ORDINALITY AS o(output, i)
   WHERE :ONCELY_SCHEMA.output_refusal(octet_length(o.output)) IS NOT NULL
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'complete_jobs: job %: %', $1[refused.i], refused.why
      USING ERRCODE = 'program_limit_exceeded', HINT = 'Fail that job; complete the others without it.';
  END IF;
  SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.queue), '{}'),
         coalesce(array_agg(c.leased_by IS NOT NULL), '{}')
    INTO done_ids, done_queues, by_cpp_worker
    FROM :ONCELY_SCHEMA.complete_leases($1, $2, $3::jsonb[], NULL, NULL, NULL) c;
  INSERT INTO :ONCELY_SCHEMA.lease_completions (lease_token, job_id)
  SELECT DISTINCT ON (d.id) h.token, d.id
    FROM unnest(done_ids, by_cpp_worker) AS d(id, cpp)
    JOIN unnest($1, $2) AS h(id, token) ON h.id = d.id
   WHERE d.cpp;
  PERFORM :ONCELY_SCHEMA.count_protocol_outcome(d.queue, count(*), 0, 0, 0)
     FROM unnest(done_queues, by_cpp_worker) AS d(queue, cpp)
    WHERE NOT d.cpp
    GROUP BY d.queue;
  RETURN QUERY SELECT unnest(done_ids);
END
$$;

-- The version-20 signature: the same, without outputs (workers and clients that have none).
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.complete_jobs(ids bigint[], lease_tokens bigint[])
RETURNS SETOF bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT * FROM :ONCELY_SCHEMA.complete_jobs($1, $2, NULL)
$$;

-- 7. Every completed job's record, from its marker and, in transaction mode, its batch's
-- completion row: what oncely jobs show, jobs list --state completed and the console read.
-- A marker from before this version shows when it was written as its completion.
CREATE VIEW :ONCELY_SCHEMA.completed_jobs AS
SELECT p.job_id, p.queue, p.kind, p.idempotency_key,
       coalesce(p.completed_at, t.completed_at, p.processed_at) AS completed_at,
       coalesce(p.attempt, t.attempts[x.i]) AS attempt,
       coalesce(p.run_time, t.run_us[x.i] * interval '1 microsecond') AS run_time,
       coalesce(p.worker, t.worker) AS worker,
       coalesce(p.trace_id, t.trace_ids[x.i]) AS trace_id,
       coalesce(p.output, t.outputs[x.i]) AS output,
       p.processed_at
  FROM :ONCELY_SCHEMA.processed_jobs p
  LEFT JOIN :ONCELY_SCHEMA.transaction_completions t ON t.xact = p.completion_xact
  LEFT JOIN LATERAL (SELECT array_position(t.job_ids, p.job_id) AS i) x ON true;
