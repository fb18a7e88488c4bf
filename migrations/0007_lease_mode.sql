-- oncely schema, version 7: lease mode, for jobs that run longer than a transaction should
-- stay open (exports, webhooks, slow mail servers).
--
-- A lease queue's claim commits at once: it gives the job a fencing token, names the
-- worker that holds it, counts the attempt, and sets run_at to the lease's expiry. While
-- the handler runs, its process renews the lease (run_at moves on); the completion, a
-- retry or a dead-letter move touches the row only where lease_token is still the one it
-- was given. When the worker dies, run_at passes and the ordinary claim takes the job
-- back: no rescuer. A transaction-mode job never has a token.

-- Tokens come from a sequence of their own and are never reused: a worker that froze past
-- its lease holds a token nobody else will ever be given again.
CREATE SEQUENCE :ONCELY_SCHEMA.lease_tokens AS bigint;

-- Both nullable without a default: adding them rewrites nothing, whatever the table holds.
ALTER TABLE :ONCELY_SCHEMA.jobs
  ADD COLUMN lease_token bigint,
  ADD COLUMN leased_by bigint;  -- workers.id of the process holding the lease (no foreign key:
                                -- a worker row is removed when it goes stale, its lease stays)

-- The claim looks up whether another job of the same (kind, idempotency_key) holds a lease,
-- so that two copies of one key never run at once. Only leased rows are in this index:
-- transaction-mode jobs and waiting lease jobs cost it nothing.
CREATE INDEX jobs_leased_key_idx ON :ONCELY_SCHEMA.jobs (kind, idempotency_key)
  WHERE lease_token IS NOT NULL;

-- A producer cannot hand a new job a lease (or claim it for a worker): the check of
-- version 6 refuses lease_token and leased_by as it refuses attempts and errors.
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.check_new_jobs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  handed_out constant bigint := coalesce(pg_sequence_last_value(':ONCELY_SCHEMA.jobs_id_seq'::regclass), 0);
  forged record;
BEGIN
  SELECT n.id, n.kind,
         CASE WHEN n.id > handed_out THEN 'id'
              WHEN n.created_at <> now() THEN 'created_at'
              WHEN n.lease_token IS NOT NULL OR n.leased_by IS NOT NULL THEN 'lease'
              ELSE 'history' END AS what
    INTO forged
    FROM new_jobs n
   WHERE n.id > handed_out OR n.attempts <> 0 OR n.errors <> '[]'::jsonb OR n.last_error IS NOT NULL
      OR n.created_at <> now() OR n.lease_token IS NOT NULL OR n.leased_by IS NOT NULL
   LIMIT 1;
  IF NOT FOUND THEN
    RETURN NULL;
  ELSIF forged.what = 'id' THEN
    RAISE EXCEPTION 'job id % (kind %) was not handed out by the jobs sequence: ids are set by oncely only',
                    forged.id, quote_literal(forged.kind)
      USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_new_job_id_from_sequence',
            HINT = 'Leave out the id column (and OVERRIDING SYSTEM VALUE).';
  ELSIF forged.what = 'created_at' THEN
    RAISE EXCEPTION 'job % (kind %) was not created now: created_at is set by oncely only',
                    forged.id, quote_literal(forged.kind)
      USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_new_job_created_now',
            HINT = 'Leave out the created_at column.';
  ELSIF forged.what = 'lease' THEN
    RAISE EXCEPTION 'job % (kind %) has a lease already: lease_token and leased_by are set by oncely only',
                    forged.id, quote_literal(forged.kind)
      USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_new_job_has_no_lease',
            HINT = 'Leave out the lease_token and leased_by columns.';
  ELSE
    RAISE EXCEPTION 'job % (kind %) has attempts already: attempts, errors and last_error are set by oncely only',
                    forged.id, quote_literal(forged.kind)
      USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_new_job_has_no_history',
            HINT = 'Leave out the attempts, errors and last_error columns.';
  END IF;
END
$$;
