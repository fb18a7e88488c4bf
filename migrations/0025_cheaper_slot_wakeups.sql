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
-- - The triggers fire BEFORE the row changes, so their WHEN is evaluated row by row as the
--   statement runs, and the first row of a limited queue that frees a slot sends the NOTIFY
--   (delivered at the commit, like every NOTIFY; dropped if the transaction rolls back) and
--   writes the queue's name to the transaction's setting oncely.slots_announced. Every later
--   row of that queue in the transaction fails the WHEN, evaluated in C: no event, no call.
-- - A transaction that settles leases and then claims the same queue, as a C++ lease queue
--   does, takes its freed slots back itself: it writes oncely.slots_announced before it
--   settles, and nobody is woken for slots they would not find. It does so only when its
--   claim asks for at least as many jobs as it settles (store/job_leases.cpp).
-- - lease_lock_ready() no longer counts the slots it takes in oncely.slots_retaken.
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
  -- One per queue and transaction: PostgreSQL folds equal notifications of a transaction,
  -- and the triggers' WHEN skips the queue's later rows.
  PERFORM pg_notify(TG_TABLE_SCHEMA || '.jobs', OLD.queue);
  PERFORM set_config('oncely.slots_announced', OLD.queue, true);
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  RETURN NEW;
END
$$;

-- A job of a limited queue that leaves (completed, dead-lettered, cancelled).
CREATE TRIGGER jobs_limited_slot_freed_by_delete
  BEFORE DELETE ON :ONCELY_SCHEMA.jobs
  FOR EACH ROW
  WHEN (OLD.concurrency_key IS NOT NULL
        AND pg_catalog.current_setting('oncely.slots_announced', true) IS DISTINCT FROM OLD.queue)
  EXECUTE FUNCTION :ONCELY_SCHEMA.on_limited_slot_freed();

-- A job of a limited queue given back (failed, released: its lease_token cleared; a
-- transaction-mode job, which has none, retried), or released by its last parent.
CREATE TRIGGER jobs_limited_slot_freed_by_update
  BEFORE UPDATE ON :ONCELY_SCHEMA.jobs
  FOR EACH ROW
  WHEN (OLD.concurrency_key IS NOT NULL AND NEW.lease_token IS NULL
        AND pg_catalog.current_setting('oncely.slots_announced', true) IS DISTINCT FROM OLD.queue)
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
