-- Flow control across every worker (first part: concurrency limits and fairness, enforced by
-- the lease claim, lease_jobs() and the C++ lease queues alike).
--
-- A queue's limits are a row of queue_limits; a queue without one pays nothing: its claim is
-- the one of version 18. A limited queue's jobs carry their key in jobs.concurrency_key,
-- written when they are enqueued (by the producer, or from the payload by the insert trigger
-- below), so that the claim finds each key's jobs, and each key's running jobs, by index.
--
-- The rule, for a lease queue: at no instant do more of its jobs hold a live lease than
-- `concurrency`, nor more of one key's than `per_key_concurrency`. A lease counts while it
-- is live (run_at, its expiry, in the future): a job that completes, fails or is released
-- gives its slot back in that transaction, and a dead or frozen worker's slots come back when
-- its leases expire. The claims of a limited queue take turns (an advisory lock for the
-- claim's transaction), so each counts what the one before it committed.

-- A JSON pointer (RFC 6901: '/a/b~1c') as the path of the #>> operator ('{a,b/c}'); NULL for
-- anything that does not start with '/'.
CREATE FUNCTION :ONCELY_SCHEMA.json_pointer_path(pointer text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE WHEN pointer LIKE '/%'
              THEN ARRAY(SELECT replace(replace(p, '~1', '/'), '~0', '~')
                           FROM unnest((string_to_array(pointer, '/'))[2:]) WITH ORDINALITY AS t(p, n) ORDER BY n) END
$$;

CREATE TABLE :ONCELY_SCHEMA.queue_limits (
  queue               text        PRIMARY KEY,
  -- The most jobs of the queue running at once, across every worker.
  concurrency         integer,
  -- What a job's key is: 'concurrency_key' (the jobs column a producer sets), or a JSON
  -- pointer (RFC 6901) into its payload, as '/tenant_id'. A job whose payload has nothing
  -- there, or whose producer set no key, has the key '' (one key for all of them).
  key                 text,
  -- The most jobs of one key running at once.
  per_key_concurrency integer,
  updated_at          timestamptz NOT NULL DEFAULT now(),
  -- The pointer as the path of the #>> operator, for the insert trigger.
  key_path            text[] GENERATED ALWAYS AS (:ONCELY_SCHEMA.json_pointer_path(key)) STORED,
  CONSTRAINT queue_limits_queue_name CHECK (queue <> '' AND octet_length(queue) <= 128),
  CONSTRAINT queue_limits_concurrency_range CHECK (concurrency BETWEEN 1 AND 100000),
  CONSTRAINT queue_limits_per_key_concurrency_range CHECK (per_key_concurrency BETWEEN 1 AND 100000),
  CONSTRAINT queue_limits_key_form CHECK (
    key = 'concurrency_key' OR (key ~ '^(/([^~/]|~[01])*)+$' AND octet_length(key) <= 256)),
  CONSTRAINT queue_limits_per_key_needs_key CHECK (per_key_concurrency IS NULL OR key IS NOT NULL),
  CONSTRAINT queue_limits_some_limit CHECK (concurrency IS NOT NULL OR key IS NOT NULL)
);

COMMENT ON TABLE :ONCELY_SCHEMA.queue_limits IS
  'Limits that hold for every worker of a queue together (docs/configuration.md, "Limits")';

-- A producer may set the key itself (INSERT, enqueue()); NULL for a job of a queue without
-- limits, which is every job of most installations: no index entry, no cost.
ALTER TABLE :ONCELY_SCHEMA.jobs ADD COLUMN concurrency_key text;
ALTER TABLE :ONCELY_SCHEMA.jobs ADD CONSTRAINT jobs_concurrency_key_length
  CHECK (octet_length(concurrency_key) <= 1024) NOT VALID;

-- A limited queue's jobs by key, in claim order within each: the fair claim walks the keys
-- (one descent each) and takes each one's first ready jobs.
CREATE INDEX jobs_concurrency_key_idx ON :ONCELY_SCHEMA.jobs (queue, concurrency_key, priority, run_at, id)
  WHERE concurrency_key IS NOT NULL;
-- A limited queue's leased jobs by key: what runs now, counted by the claim.
CREATE INDEX jobs_leased_concurrency_key_idx ON :ONCELY_SCHEMA.jobs (queue, concurrency_key)
  WHERE concurrency_key IS NOT NULL AND lease_token IS NOT NULL;

-- The key of each new job of a limited queue, from its producer or its payload ('' when
-- neither has one). A second statement trigger beside on_jobs_inserted(): with no limits
-- anywhere it reads one empty table.
CREATE FUNCTION :ONCELY_SCHEMA.on_jobs_inserted_keys() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF EXISTS (SELECT FROM :ONCELY_SCHEMA.queue_limits) THEN
    UPDATE :ONCELY_SCHEMA.jobs j
       SET concurrency_key = coalesce(n.payload #>> l.key_path, '')
      FROM new_jobs n JOIN :ONCELY_SCHEMA.queue_limits l ON l.queue = n.queue
     WHERE j.id = n.id AND n.concurrency_key IS NULL;
  END IF;
  RETURN NULL;
END
$$;

REVOKE EXECUTE ON FUNCTION :ONCELY_SCHEMA.on_jobs_inserted_keys() FROM PUBLIC;

CREATE TRIGGER jobs_inserted_keys
  AFTER INSERT ON :ONCELY_SCHEMA.jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :ONCELY_SCHEMA.on_jobs_inserted_keys();

-- Sets (or, with every limit NULL, removes) the limits of `queue`, and gives the queue's
-- jobs their keys under them. It waits for the transactions that are enqueueing to end and
-- holds new enqueues back until it commits (a SHARE ROW EXCLUSIVE lock on jobs, usually
-- milliseconds): a job enqueued meanwhile would otherwise miss its key and not be claimed by
-- the fair claim. A job keeps the key it has: a new `key` applies to the jobs enqueued
-- from then on and to those that had none (enqueued before the queue had limits). It runs
-- as the schema's owner (the keys are not the caller's to write otherwise): EXECUTE is
-- granted to the operator and worker roles only.
CREATE FUNCTION :ONCELY_SCHEMA.set_queue_limits(queue text, concurrency integer, key text,
                                                per_key_concurrency integer)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  limits :ONCELY_SCHEMA.queue_limits;
BEGIN
  IF $2 IS NULL AND $3 IS NULL AND $4 IS NULL THEN
    DELETE FROM :ONCELY_SCHEMA.queue_limits l WHERE l.queue = $1;
    RETURN;
  END IF;
  LOCK TABLE :ONCELY_SCHEMA.jobs IN SHARE ROW EXCLUSIVE MODE;
  INSERT INTO :ONCELY_SCHEMA.queue_limits AS l (queue, concurrency, key, per_key_concurrency)
  VALUES ($1, $2, $3, $4)
  ON CONFLICT (queue) DO UPDATE
     SET concurrency = EXCLUDED.concurrency, key = EXCLUDED.key,
         per_key_concurrency = EXCLUDED.per_key_concurrency, updated_at = now()
  RETURNING l.* INTO limits;
  UPDATE :ONCELY_SCHEMA.jobs j
     SET concurrency_key = coalesce(j.payload #>> limits.key_path, '')
   WHERE j.queue = $1 AND j.concurrency_key IS NULL;
END
$$;

-- The lease claim's first statement (version 18) becomes lease_lock_in_order(), the scan of a
-- queue in claim order; lease_lock_ready(), which the C++ lease queues and lease_jobs()
-- call, now applies the queue's limits around it. A queue without limits is scanned as
-- before. A limited one:
-- - waits for the claim before it to commit (its claims take turns, per queue), so that the
--   next statement, with a snapshot taken after that, counts the leases that claim made;
-- - leases at most `concurrency` minus the live leases of the queue;
-- - with a key: walks the queue's keys, takes from each at most its per-key room of its
--   first ready jobs, and of those the first of each key before the second of any
--   (round-robin), so that a key with a long backlog delays the others by one turn;
-- - always from the head of the queue (the claim start of a C++ lease queue, after_*, is for
--   scans that skip finished jobs; a limited scan is bounded by its room instead).
ALTER FUNCTION :ONCELY_SCHEMA.lease_lock_ready(text, integer, smallint, bigint, bigint)
  RENAME TO lease_lock_in_order;

CREATE FUNCTION :ONCELY_SCHEMA.lease_lock_ready(queue text, max_jobs integer, after_priority smallint,
                                                after_run_at_us bigint, after_id bigint)
RETURNS TABLE (id bigint, priority smallint, run_at_us bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  limits :ONCELY_SCHEMA.queue_limits;
  room integer;
BEGIN
  SELECT l.* INTO limits FROM :ONCELY_SCHEMA.queue_limits l WHERE l.queue = $1;
  IF NOT FOUND THEN
    RETURN QUERY SELECT * FROM :ONCELY_SCHEMA.lease_lock_in_order($1, $2, $3, $4, $5);
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock(1869505389, hashtext(':ONCELY_SCHEMA' || E'\x1f' || $1));  -- 'oncm': a limited queue's claims
  SELECT least($2, limits.concurrency - count(*))::integer INTO room
    FROM :ONCELY_SCHEMA.jobs j
   WHERE j.queue = $1 AND j.concurrency_key IS NOT NULL AND j.lease_token IS NOT NULL AND j.run_at > now();
  room := coalesce(room, $2);
  IF room <= 0 THEN
    RETURN;
  END IF;
  IF limits.key IS NULL THEN
    RETURN QUERY SELECT * FROM :ONCELY_SCHEMA.lease_lock_in_order($1, room, NULL, NULL, NULL);
    RETURN;
  END IF;
  RETURN QUERY
  WITH RECURSIVE keys(k) AS (
    SELECT min(j.concurrency_key) FROM :ONCELY_SCHEMA.jobs j WHERE j.queue = $1 AND j.concurrency_key IS NOT NULL
    UNION ALL
    SELECT (SELECT min(j.concurrency_key) FROM :ONCELY_SCHEMA.jobs j
             WHERE j.queue = $1 AND j.concurrency_key > keys.k)
      FROM keys
     WHERE keys.k IS NOT NULL
  ), running AS (
    SELECT j.concurrency_key AS k, count(*) AS n
      FROM :ONCELY_SCHEMA.jobs j
     WHERE j.queue = $1 AND j.concurrency_key IS NOT NULL AND j.lease_token IS NOT NULL AND j.run_at > now()
     GROUP BY j.concurrency_key
  ), ready AS MATERIALIZED (
    SELECT r.* FROM keys LEFT JOIN running ON running.k = keys.k CROSS JOIN LATERAL (
      SELECT j.id, j.kind, j.idempotency_key, j.priority, j.run_at, j.concurrency_key AS k
        FROM :ONCELY_SCHEMA.jobs j
       WHERE j.queue = $1 AND j.concurrency_key = keys.k AND j.run_at <= now()
         AND (j.idempotency_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM :ONCELY_SCHEMA.jobs o
                WHERE o.kind = j.kind AND o.idempotency_key = j.idempotency_key
                  AND o.lease_token IS NOT NULL AND o.run_at > now()))
       ORDER BY j.priority, j.run_at, j.id
       LIMIT greatest(0, least(room, coalesce(limits.per_key_concurrency - coalesce(running.n, 0), room)))
         FOR UPDATE SKIP LOCKED
    ) r
    WHERE keys.k IS NOT NULL
  ), turns AS (
    SELECT ready.*, row_number() OVER (PARTITION BY ready.k ORDER BY ready.priority, ready.run_at, ready.id) AS turn
      FROM ready
  ), chosen AS (
    SELECT turns.* FROM turns ORDER BY turns.turn, turns.priority, turns.run_at, turns.id LIMIT room
  )
  SELECT chosen.id, chosen.priority,
         CASE WHEN isfinite(chosen.run_at) THEN (extract(epoch FROM chosen.run_at) * 1000000)::bigint END
    FROM chosen
   WHERE chosen.idempotency_key IS NULL
      OR pg_try_advisory_xact_lock(1869505388, hashtext(chosen.kind || E'\x1f' || chosen.idempotency_key))
   ORDER BY chosen.priority, chosen.run_at, chosen.id;
END
$$;
