-- oncely schema, version 14: one statement trigger on INSERT into jobs instead of two.
--
-- Versions 1 and 6 each gave jobs an AFTER INSERT statement trigger with a transition table:
-- the wake-up NOTIFY and the check that a producer forged nothing. Each one costs its own
-- transition table, its own function call with its own search_path switch, and its own
-- query over the new rows: for a single-row INSERT the two took 81-86 us of its 221-231 us
-- (EXPLAIN ANALYZE, medians of 400, a 2-core VM). One trigger reads the new rows once, in
-- one query that both decides whether any row is forged and lists the queues to wake (the
-- detailed query that names the forged row runs only when one is): 61-75 us of 196-226 us.
-- What is left is the call itself with its search_path switch (about 17 us), the query
-- (about 35), the sequence read (5) and the NOTIFY (9).
--
-- The checks and their errors are version 7's, unchanged. The trigger runs as the owner
-- (SECURITY DEFINER: it reads the id sequence, which a producer may not); the NOTIFY it
-- sends needs no privilege, so running it as the owner changes nothing for the listener.
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.on_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  handed_out constant bigint := coalesce(pg_sequence_last_value(':ONCELY_SCHEMA.jobs_id_seq'::regclass), 0);
  any_forged boolean;
  ready_queues text;
  forged record;
BEGIN
  SELECT bool_or(n.id > handed_out OR n.attempts <> 0 OR n.errors <> '[]'::jsonb OR n.last_error IS NOT NULL
                 OR n.created_at <> now() OR n.lease_token IS NOT NULL OR n.leased_by IS NOT NULL),
         string_agg(DISTINCT n.queue, ',') FILTER (WHERE n.run_at <= now())
    INTO any_forged, ready_queues
    FROM new_jobs n;
  IF any_forged THEN
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
    IF forged.what = 'id' THEN
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
  END IF;
  -- Wakes idle workers: one NOTIFY per statement (not per row) on '<schema>.jobs', listing
  -- the queues that received a job that is ready now; later jobs are found by polling.
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

REVOKE EXECUTE ON FUNCTION :ONCELY_SCHEMA.on_jobs_inserted() FROM PUBLIC;

-- IF EXISTS and OR REPLACE: the migration can run again (as a test of the migrator does).
DROP TRIGGER IF EXISTS jobs_check_new_jobs ON :ONCELY_SCHEMA.jobs;
DROP TRIGGER IF EXISTS jobs_notify_inserted ON :ONCELY_SCHEMA.jobs;
DROP FUNCTION IF EXISTS :ONCELY_SCHEMA.check_new_jobs();
DROP FUNCTION IF EXISTS :ONCELY_SCHEMA.notify_jobs_inserted();
DROP TRIGGER IF EXISTS jobs_inserted ON :ONCELY_SCHEMA.jobs;

CREATE TRIGGER jobs_inserted
  AFTER INSERT ON :ONCELY_SCHEMA.jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :ONCELY_SCHEMA.on_jobs_inserted();
