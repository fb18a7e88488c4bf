-- oncely schema, version 5: rows every claim can handle, replay keeps a keyless job's key,
-- a job transaction that only oncely can commit, and crash records that name their cause.

-- 1. Bounded names and keys. The claim inserts (kind, idempotency_key) into the unique
-- index of processed_jobs, and the claim index holds the queue name: a btree entry is at
-- most 2704 bytes, and one longer row made every claim that included it fail, stopping its
-- queue. These bounds leave room for all three in one entry. NOT VALID: a row already in
-- the table is not checked here (the migration would fail on it); the claim dead-letters
-- such a row as `unreadable` instead.
ALTER TABLE :ONCELY_SCHEMA.jobs
  ADD CONSTRAINT jobs_queue_at_most_128_bytes CHECK (octet_length(queue) <= 128) NOT VALID,
  ADD CONSTRAINT jobs_kind_at_most_255_bytes CHECK (octet_length(kind) <= 255) NOT VALID,
  ADD CONSTRAINT jobs_idempotency_key_at_most_1024_bytes CHECK (octet_length(idempotency_key) <= 1024) NOT VALID;

-- 2. The key of a job without an idempotency key is its job id. A replay enqueues a new
-- job (a new id); it carries the id of the job first enqueued, so that handlers and
-- downstream services see the same key on every replay (Idempotency-Key, ONCELY_IDEMPOTENCY_KEY)
-- and can deduplicate it. NULL: the job is its own origin.
ALTER TABLE :ONCELY_SCHEMA.jobs ADD COLUMN origin_job_id bigint;
ALTER TABLE :ONCELY_SCHEMA.dead_letters ADD COLUMN origin_job_id bigint;

-- 3. Only oncely commits a job transaction. A handler that ran COMMIT (or END, or PREPARE
-- TRANSACTION) on its job's transaction used to commit the dedup markers of the whole
-- batch with it, so the jobs after it were later deleted as duplicates without ever
-- running. Every claim that locks jobs inserts one row here; the batch's completion
-- deletes it; a deferred trigger checks at COMMIT that it is gone, and otherwise fails the
-- COMMIT, so that nothing of the batch is committed. One small row per batch, not per job.
CREATE TABLE :ONCELY_SCHEMA.commit_guards (
  xact xid8 NOT NULL DEFAULT pg_current_xact_id()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
CREATE INDEX commit_guards_xact_idx ON :ONCELY_SCHEMA.commit_guards (xact);

CREATE FUNCTION :ONCELY_SCHEMA.check_batch_completed() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM :ONCELY_SCHEMA.commit_guards WHERE xact = NEW.xact) THEN
    RAISE EXCEPTION 'a job''s transaction was committed by its handler: only oncely may commit it'
      USING ERRCODE = 'OC001',
            HINT = 'Handlers must not run COMMIT, END or PREPARE TRANSACTION; the batch is rolled back and redelivered.';
  END IF;
  RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER commit_guards_batch_completed
  AFTER INSERT ON :ONCELY_SCHEMA.commit_guards
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION :ONCELY_SCHEMA.check_batch_completed();

-- 4. A record of one job counts as that job's crashed attempt only if its batch ran with
-- nothing else in flight in its process (see src/execution/attribution_gate.hpp): when a process with
-- four busy threads dies, the single-job records of the three innocent ones do not count.
ALTER TABLE :ONCELY_SCHEMA.attempts_in_flight ADD COLUMN exclusive boolean NOT NULL DEFAULT false;
