-- oncely schema, version 25: a limited queue's freed slots are announced once per
-- transaction, at the first row that frees one, instead of row by row at the commit.
--
-- Version 23 woke the workers of a limited queue with two deferred constraint triggers, one
-- event per completed, failed or released job, each matched at the commit against the slots
-- its own transaction had taken back (oncely.slots_retaken, written by every limited claim).
-- That bookkeeping was most of what a limit cost: on a no-op lease burn-down under a global
-- limit equal to the worker's concurrency, dropping the two triggers alone took the limited
-- run from 0.80x to 0.89x of the same run without limits (8 interleaved rounds; a trigger
-- whose body only returned cost as much as the real one: the price is the per-row deferred
-- event and its function call, not what the function does).
--
-- Now:
-- - The triggers are plain AFTER ROW triggers. Their WHEN, evaluated as each row changes, is
--   true for the first row of a limited queue that frees a slot in the transaction, and it
--   claims the announcement there and then: it writes the queue's name to the transaction's
--   setting oncely.slots_announced, which every later row of that queue finds (all in C: no
--   event queued, no function called). The one event queued sends the NOTIFY at the end of
--   its statement (delivered at the commit, like every NOTIFY; dropped if the transaction
--   rolls back, and the setting with it).
-- - A transaction that settles leases and then claims the same queue, as a C++ lease queue
--   does, takes its freed slots back itself: it writes oncely.slots_announced before it
--   settles, and nobody is woken for slots they would not find. It does so only when its
--   claim asks for at least as many jobs as it settles (store/job_leases.cpp).
-- - lease_lock_ready() no longer counts the slots it takes in oncely.slots_retaken.
-- Not BEFORE triggers, whose WHEN would see each row's predecessor's setting just as well: a
-- row with a BEFORE DELETE or UPDATE trigger is locked before it is deleted or updated, a
-- second write (and WAL record) of every job of every queue, limited or not (tried: the
-- no-op burn-downs without limits measured 0.89x in transaction mode, 0.92x in lease mode).
--
-- What changes for a worker that waits for a slot: nothing when another transaction frees
-- it. One case wakes no one now where version 23 did: a worker that settles and claims in one
-- transaction, frees a slot of key A and fills its claim with other keys' jobs. Its claim
-- was full, so it had no room for A's job; a worker held back on A finds the slot at its next
-- look (the poll interval, or limits_retry_in()), as after a lease that expires.

DROP TRIGGER jobs_limited_slot_freed_by_delete ON :ONCELY_SCHEMA.jobs;
DROP TRIGGER jobs_limited_slot_freed_by_update ON :ONCELY_SCHEMA.jobs;

CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.on_limited_slot_freed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- The triggers' WHEN let one row per queue and transaction through (and PostgreSQL folds
  -- equal notifications of a transaction).
  PERFORM pg_notify(TG_TABLE_SCHEMA || '.jobs', OLD.queue);
  RETURN NULL;
END
$$;

-- A job of a limited queue that leaves (completed, dead-lettered, cancelled).
CREATE TRIGGER jobs_limited_slot_freed_by_delete
  AFTER DELETE ON :ONCELY_SCHEMA.jobs
  FOR EACH ROW
  WHEN (OLD.concurrency_key IS NOT NULL
        AND pg_catalog.current_setting('oncely.slots_announced', true) IS DISTINCT FROM OLD.queue
        AND pg_catalog.set_config('oncely.slots_announced', OLD.queue, true) IS NOT NULL)
  EXECUTE FUNCTION :ONCELY_SCHEMA.on_limited_slot_freed();

-- A job of a limited queue given back (failed, released: its lease_token cleared; a
-- transaction-mode job, which has none, retried), or released by its last parent.
CREATE TRIGGER jobs_limited_slot_freed_by_update
  AFTER UPDATE ON :ONCELY_SCHEMA.jobs
  FOR EACH ROW
  WHEN (OLD.concurrency_key IS NOT NULL AND NEW.lease_token IS NULL
        AND pg_catalog.current_setting('oncely.slots_announced', true) IS DISTINCT FROM OLD.queue
        AND pg_catalog.set_config('oncely.slots_announced', OLD.queue, true) IS NOT NULL)
  EXECUTE FUNCTION :ONCELY_SCHEMA.on_limited_slot_freed();

-- lease_lock_ready() without its count of the slots taken (the block that wrote
-- oncely.slots_retaken), edited in place as migration 24 edits the claims.
DO $$
DECLARE
  claim constant regprocedure :=
    ':ONCELY_SCHEMA.lease_lock_ready(text, integer, smallint, bigint, bigint)'::regprocedure;
  edited text := regexp_replace(pg_get_functiondef(claim),
                                '\n  -- The slots taken, per key,.*GROUP BY e\.slot\) r\), true\);', '');
BEGIN
  IF edited LIKE '%slots_retaken%' THEN
    RAISE EXCEPTION 'migration 25: lease_lock_ready() is not the version 24 function it expects';
  END IF;
  EXECUTE edited;
END
$$;
