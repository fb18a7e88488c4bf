-- oncely schema, version 9: the daily controls. Paused queues (a table every worker
-- watches), and unique jobs: at most one live job per (kind, unique_key).

-- 1. Pauses. A row pauses its queue: workers stop claiming from it within a second (the
-- trigger's NOTIFY, a poll as the fallback); running jobs finish, enqueue goes on. The row
-- is the whole state, so a pause outlives every worker and survives restarts. A queue
-- need not exist anywhere else to be paused (a queue can be paused before its first job).
CREATE TABLE :ONCELY_SCHEMA.queue_pauses (
  queue     text        PRIMARY KEY,
  paused_at timestamptz NOT NULL DEFAULT now(),
  reason    text,
  -- Who paused it, as the database knows them: current_user and application_name.
  paused_by text        NOT NULL,
  CONSTRAINT queue_pauses_queue_not_empty CHECK (queue <> ''),
  CONSTRAINT queue_pauses_queue_at_most_128_bytes CHECK (octet_length(queue) <= 128)
);

-- One NOTIFY per statement on '<schema>.queue_pauses'; no payload: a worker re-reads the
-- pauses of its queues (a handful of rows), which also covers a notification it missed.
CREATE FUNCTION :ONCELY_SCHEMA.notify_queue_pauses() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  PERFORM pg_notify(TG_TABLE_SCHEMA || '.queue_pauses', '');
  RETURN NULL;
END
$$;

CREATE TRIGGER queue_pauses_notify
  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON :ONCELY_SCHEMA.queue_pauses
  FOR EACH STATEMENT EXECUTE FUNCTION :ONCELY_SCHEMA.notify_queue_pauses();

-- 2. Unique jobs. A job's row lives from its enqueue until it completes or is
-- dead-lettered (the row is deleted then), so a unique index over the rows that have a
-- unique_key is exactly "at most one live job per (kind, unique_key)". A constraint, not an
-- advisory lock: a producer that inserts and then rolls back leaves nothing behind, and a
-- second producer waiting on its uncommitted entry then inserts. Only rows with a key are
-- in the index: plain jobs cost it nothing. Unlike idempotency_key (which deduplicates
-- processing, for ever within the dedup window), unique_key is free again once the job has
-- left the table. NOT VALID: the new column is NULL in every existing row.
ALTER TABLE :ONCELY_SCHEMA.jobs
  ADD COLUMN unique_key text,
  ADD CONSTRAINT jobs_unique_key_not_empty CHECK (unique_key <> '') NOT VALID,
  ADD CONSTRAINT jobs_unique_key_at_most_1024_bytes CHECK (octet_length(unique_key) <= 1024) NOT VALID;
CREATE UNIQUE INDEX jobs_unique_key_idx ON :ONCELY_SCHEMA.jobs (kind, unique_key) WHERE unique_key IS NOT NULL;

-- A unique enqueue: inserts the job, or, when a live job holds (kind, unique_key), does
-- what on_conflict says:
--   skip     returns the live job's id (outcome 'existing')
--   replace  gives a pending live job this payload, run_at, priority and max_attempts
--            ('replaced'); one that is running is left alone ('running'), found without
--            waiting longer than 200 ms for its row lock (a worker's batch holds it)
--   error    raises unique_violation naming the live job
-- The INSERT ... ON CONFLICT DO NOTHING waits for an uncommitted holder of the key: if it
-- rolls back, this one inserts. When the live job it conflicted with is gone by the time
-- it is looked up (it completed in between), the loop inserts again, so skip and replace
-- always come back with an id. Each statement of a VOLATILE function sees what committed
-- before it began (READ COMMITTED); under REPEATABLE READ a conflict with a job the
-- snapshot cannot see is a serialization failure, as for any INSERT.
CREATE FUNCTION :ONCELY_SCHEMA.enqueue_unique(
  kind            text,
  payload         jsonb,
  queue           text,
  idempotency_key text,
  run_at          timestamptz,
  priority        integer,
  max_attempts    integer,
  unique_key      text,
  on_conflict     text,
  OUT id          bigint,
  OUT outcome     text
)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
  saved_lock_timeout text;
  holder_running boolean;
  tries integer := 0;
BEGIN
  IF $9 IS NULL OR $9 NOT IN ('skip', 'replace', 'error') THEN
    RAISE EXCEPTION 'on_conflict must be skip, replace or error, not %', coalesce(quote_literal($9), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF $8 IS NULL THEN
    RAISE EXCEPTION 'enqueue_unique needs a unique_key' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  LOOP
    tries := tries + 1;
    INSERT INTO :ONCELY_SCHEMA.jobs AS j (kind, payload, queue, idempotency_key, run_at, priority, max_attempts, unique_key)
    VALUES ($1, coalesce($2, '{}'), coalesce($3, 'default'), $4, coalesce($5, now()), coalesce($6, 0)::smallint, $7, $8)
    ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO id;
    IF FOUND THEN
      outcome := 'inserted';
      RETURN;
    END IF;
    IF $9 = 'replace' THEN
      saved_lock_timeout := current_setting('lock_timeout');
      PERFORM set_config('lock_timeout', '200ms', true);
      BEGIN
        SELECT j.id, j.lease_token IS NOT NULL AND j.run_at > now() INTO id, holder_running
          FROM :ONCELY_SCHEMA.jobs j WHERE j.kind = $1 AND j.unique_key = $8
           FOR UPDATE;
      EXCEPTION WHEN lock_not_available THEN
        -- Locked past the timeout: a worker's batch is running it.
        id := NULL;
        holder_running := true;
      END;
      PERFORM set_config('lock_timeout', saved_lock_timeout, true);
      IF holder_running AND id IS NULL THEN
        SELECT j.id INTO id FROM :ONCELY_SCHEMA.jobs j WHERE j.kind = $1 AND j.unique_key = $8;
      END IF;
      IF id IS NOT NULL AND holder_running THEN
        outcome := 'running';
        RETURN;
      ELSIF id IS NOT NULL THEN
        UPDATE :ONCELY_SCHEMA.jobs j
           SET payload = coalesce($2, '{}'), run_at = coalesce($5, now()), priority = coalesce($6, 0)::smallint,
               max_attempts = $7
         WHERE j.id = enqueue_unique.id;
        outcome := 'replaced';
        RETURN;
      END IF;
    ELSE
      SELECT j.id INTO id FROM :ONCELY_SCHEMA.jobs j WHERE j.kind = $1 AND j.unique_key = $8;
      IF FOUND AND $9 = 'error' THEN
        RAISE EXCEPTION 'job % (kind %) is live with unique key %', id, quote_literal($1), quote_literal($8)
          USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_unique_key_idx',
                HINT = 'on_conflict => ''skip'' returns its id instead, ''replace'' replaces it while it waits.';
      ELSIF FOUND THEN
        outcome := 'existing';
        RETURN;
      END IF;
    END IF;
    -- The live job left between the INSERT and the lookup: insert again.
    IF tries >= 100 THEN
      RAISE EXCEPTION 'unique enqueue of kind % key % kept conflicting with jobs that left at once', quote_literal($1),
                      quote_literal($8) USING ERRCODE = 'serialization_failure';
    END IF;
  END LOOP;
END
$$;

-- enqueue() takes unique_key and on_conflict too (a new signature: the old one is
-- replaced, or calls with named arguments would be ambiguous between the two). Without a
-- unique_key it is the plain INSERT it always was; a repeated idempotency_key still inserts.
DROP FUNCTION :ONCELY_SCHEMA.enqueue(text, jsonb, text, text, timestamptz, integer, integer);
CREATE FUNCTION :ONCELY_SCHEMA.enqueue(
  kind            text,
  payload         jsonb       DEFAULT '{}',
  queue           text        DEFAULT 'default',
  idempotency_key text        DEFAULT NULL,
  run_at          timestamptz DEFAULT NULL,
  priority        integer     DEFAULT 0,
  max_attempts    integer     DEFAULT NULL,
  unique_key      text        DEFAULT NULL,
  on_conflict     text        DEFAULT 'skip'
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
  new_id bigint;
  result record;
BEGIN
  IF $8 IS NULL THEN
    INSERT INTO :ONCELY_SCHEMA.jobs AS j (kind, payload, queue, idempotency_key, run_at, priority, max_attempts)
    VALUES ($1, coalesce($2, '{}'), coalesce($3, 'default'), $4, coalesce($5, now()), coalesce($6, 0)::smallint, $7)
    RETURNING j.id INTO new_id;
    RETURN new_id;
  END IF;
  SELECT * INTO result FROM :ONCELY_SCHEMA.enqueue_unique($1, $2, $3, $4, $5, $6, $7, $8, $9);
  IF result.outcome = 'running' THEN
    RAISE NOTICE 'job % (kind %, unique key %) is running: not replaced', result.id, quote_literal($1), quote_literal($8);
  END IF;
  RETURN result.id;
END
$$;
