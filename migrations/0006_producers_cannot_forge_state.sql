-- oncely schema, version 6: a producer's INSERT cannot forge a job's state.
--
-- A role that may INSERT into jobs could choose a job's id (OVERRIDING SYSTEM VALUE: an id
-- beyond the sequence made a later legitimate enqueue fail on jobs_pkey), its attempts,
-- errors, last_error and created_at (so that it looked retried, or older than it is), and
-- a run_at of 'infinity' (never runs, never leaves) or '-infinity' (ahead of every job of
-- its priority, and no claim position after it). These checks hold for every role,
-- the table owner too; column privileges for producer roles come with the roles.

-- 1. run_at is a finite time of years 1970 to 9999: what ISO 8601 and the claim's epoch
-- microseconds write. A CHECK, not the trigger: it costs nothing per row and holds for
-- UPDATEs too (a retry's run_at is now() plus at most 30 days). NOT VALID: a row already
-- in the table is not checked (the migration would fail on it); the claim copes with one.
ALTER TABLE :ONCELY_SCHEMA.jobs
  ADD CONSTRAINT jobs_run_at_in_range
  CHECK (run_at >= '1970-01-01 00:00:00+00' AND run_at < '10000-01-01 00:00:00+00') NOT VALID;

-- 2. A new job has no history: attempts 0, no errors, no last_error, created now, and an id
-- the sequence handed out (the identity default's, or nextval() taken first, as `dlq
-- replay` does to name the new job in the dead letter in the same statement). This needs a
-- trigger: the same columns change later by UPDATE. One per statement over its new rows,
-- not one per row: a row trigger made `oncely enqueue -` of 200,000 jobs 35-40 % slower,
-- this one costs nothing measurable; the statement fails as a whole either way.
-- SECURITY DEFINER because a producer role needs no privilege on the sequence to insert
-- (the identity default uses it for it) but would need one to read it; search_path pinned
-- so that nothing of the caller's can stand in for the functions and operators below.
CREATE FUNCTION :ONCELY_SCHEMA.check_new_jobs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  handed_out constant bigint := coalesce(pg_sequence_last_value(':ONCELY_SCHEMA.jobs_id_seq'::regclass), 0);
  forged record;
BEGIN
  SELECT n.id, n.kind,
         CASE WHEN n.id > handed_out THEN 'id'
              WHEN n.created_at <> now() THEN 'created_at'
              ELSE 'history' END AS what
    INTO forged
    FROM new_jobs n
   WHERE n.id > handed_out OR n.attempts <> 0 OR n.errors <> '[]'::jsonb OR n.last_error IS NOT NULL
      OR n.created_at <> now()
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
  ELSE
    RAISE EXCEPTION 'job % (kind %) has attempts already: attempts, errors and last_error are set by oncely only',
                    forged.id, quote_literal(forged.kind)
      USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_new_job_has_no_history',
            HINT = 'Leave out the attempts, errors and last_error columns.';
  END IF;
END
$$;

CREATE TRIGGER jobs_check_new_jobs
  AFTER INSERT ON :ONCELY_SCHEMA.jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :ONCELY_SCHEMA.check_new_jobs();
