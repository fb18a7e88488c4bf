-- oncely schema, version 16: an INSERT sends no NOTIFY while one for the same queues is on
-- its way to the workers.
--
-- PostgreSQL serialises notifying commits: a transaction that sent a NOTIFY takes the
-- database's NOTIFY queue lock before its commit record and holds it until the record is
-- flushed. Producers that each commit one job wait for one another's WAL flushes (no group
-- commit), and when the server is busy (a held xmin horizon, 32 workers on 2 cores) four
-- producers could offer 800 jobs/s no more: 74 % of them, most of their time waiting on that
-- lock (`Lock:object` in pg_stat_activity).
--
-- A wake-up that is already on its way wakes the workers for the jobs committed with it or
-- soon after, so a second one for the same queues adds nothing. The sequence wakeup_window
-- (not a table: it is not versioned, so a held horizon leaves no dead rows behind it) holds
-- the last wake-up sent and not yet acknowledged: when it was sent (milliseconds, modulo
-- 2^30) in the high bits and a hash of its payload in the low 32. The trigger sends its
-- NOTIFY, and records it there, unless the window holds the same payload sent less than
-- 10 ms ago; a skipped NOTIFY is counted in wakeup_skips. A worker's listener acknowledges
-- (wakeup_received(): sets the window back to 0) each time notifications reach it, so a
-- producer that enqueues again after its job started notifies again; and 10 ms after the
-- last notification naming a queue, if the count moved since it last looked, it has the
-- queue claim once from the head: a skipped job that committed after the claim the first
-- NOTIFY caused, with an id before the jobs that claim took, is found there. A job is never
-- lost by this: at worst (the notifying transaction rolled back, or the skipped one took
-- more than about 10 ms from its INSERT to its COMMIT, and no other job follows) it waits for
-- the workers' poll. Two payloads with the same 32-bit hash can skip each other's NOTIFY in
-- those 10 ms, with the same worst case.
--
-- Both sequences are unlogged (PostgreSQL 15): a logged setval() takes an xid and its
-- transaction a WAL flush, which put the listener's acknowledgement in the queue for the
-- WAL it was meant to spare. After a crash they start again at 0 (closed, none skipped):
-- every queue then looks back once. Older servers get logged ones.
DO $$
BEGIN
  IF current_setting('server_version_num')::int >= 150000 THEN
    CREATE UNLOGGED SEQUENCE :ONCELY_SCHEMA.wakeup_window MINVALUE 0 START WITH 0;
    CREATE UNLOGGED SEQUENCE :ONCELY_SCHEMA.wakeup_skips;
  ELSE
    CREATE SEQUENCE :ONCELY_SCHEMA.wakeup_window MINVALUE 0 START WITH 0;
    CREATE SEQUENCE :ONCELY_SCHEMA.wakeup_skips;
  END IF;
END
$$;

CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.on_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  handed_out constant bigint := coalesce(pg_sequence_last_value(':ONCELY_SCHEMA.jobs_id_seq'::regclass), 0);
  any_forged boolean;
  ready_queues text;
  forged record;
  now_ms bigint;
  tag bigint;
  on_its_way bigint;
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
  -- Unless a NOTIFY for the same queues is already on its way (see the top of this file).
  IF ready_queues IS NOT NULL THEN
    -- A NOTIFY payload is limited to 8000 bytes; '*' asks every pool to look.
    IF octet_length(ready_queues) > 7000 THEN
      ready_queues := '*';
    END IF;
    now_ms := (extract(epoch FROM clock_timestamp()) * 1000)::bigint % 1073741824;
    tag := hashtext(ready_queues)::bigint & 4294967295;
    on_its_way := coalesce(pg_sequence_last_value(':ONCELY_SCHEMA.wakeup_window'::regclass), 0);
    IF on_its_way = 0 OR on_its_way & 4294967295 <> tag
       OR (now_ms - (on_its_way >> 32) + 1073741824) % 1073741824 >= 10 THEN
      PERFORM setval(':ONCELY_SCHEMA.wakeup_window'::regclass, (now_ms << 32) | tag);
      PERFORM pg_notify(TG_TABLE_SCHEMA || '.jobs', ready_queues);
    ELSE
      -- Skipped: counted, so that the listeners' second look is made (and only then).
      PERFORM nextval(':ONCELY_SCHEMA.wakeup_skips'::regclass);
    END IF;
  END IF;
  RETURN NULL;
END
$$;


REVOKE EXECUTE ON FUNCTION :ONCELY_SCHEMA.on_jobs_inserted() FROM PUBLIC;

-- The listener's acknowledgement: closes the window, whoever opened it (closing is always
-- safe: it only lets the next INSERT notify), and returns how many NOTIFYs were skipped so
-- far. SECURITY DEFINER: a worker may close the window and read the count, nothing else.
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.wakeup_received() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  SELECT setval(':ONCELY_SCHEMA.wakeup_window'::regclass, 0)
   WHERE pg_sequence_last_value(':ONCELY_SCHEMA.wakeup_window'::regclass) <> 0;
  SELECT coalesce(pg_sequence_last_value(':ONCELY_SCHEMA.wakeup_skips'::regclass), 0)
$$;

REVOKE EXECUTE ON FUNCTION :ONCELY_SCHEMA.wakeup_received() FROM PUBLIC;
