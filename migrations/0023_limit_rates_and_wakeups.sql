-- Flow control across every worker (second part): start rates, limits on transaction-mode
-- queues, claims fair across claims, and a wake-up when a slot frees.
--
-- Rates. `rate` is "at most rate_count starts of the queue's jobs in any rate_period",
-- `per_key_rate` the same for each key. A start is a claim: the instant, on the database's
-- clock, at which lease_lock_ready() took the job (a job it took and then found already
-- processed counts too: the rate errs towards fewer starts, never more). The rule is exact,
-- a sliding log: each window row keeps the last rate_count starts, and a claim at instant t
-- takes at most rate_count minus the starts after t - rate_period. A token bucket is
-- cheaper but lets a full bucket's burst and its refill both into one period (2N starts in
-- one second under "N/1s"), which a downstream's limit does not forgive. Rates apply to
-- lease queues: a transaction-mode claim's transaction lasts as long as its jobs, and the
-- window row it wrote would stay locked for all of that time.
--
-- Transaction-mode queues: their jobs hold no lease to count, so their slots are
-- transaction-scoped advisory locks (lock_ready_limited()).
--
-- Wake-ups. A limited queue's slot frees when one of its jobs completes, fails, is released
-- or is removed: the triggers below send the queue's name on '<schema>.jobs', as the insert
-- trigger does for new jobs, so that a worker waiting for room claims at that commit rather
-- than at its next poll. Only the rows of limited queues (concurrency_key set) fire them: for
-- every other row the trigger's WHEN is false and nothing is queued. What no commit
-- announces (a lease that expires, a rate window that moves on) limits_retry_in() says, for
-- a worker to wait just that long; a transaction-mode worker that died gives its slots back
-- with its transaction, and the others find them at their next look (execution/queue_pool).

ALTER TABLE :ONCELY_SCHEMA.queue_limits
  ADD COLUMN rate_count             integer,
  ADD COLUMN rate_period_ms         bigint,
  ADD COLUMN per_key_rate_count     integer,
  ADD COLUMN per_key_rate_period_ms bigint,
  ADD CONSTRAINT queue_limits_rate_form CHECK (
    (rate_count IS NULL) = (rate_period_ms IS NULL)
    AND rate_count BETWEEN 1 AND 10000 AND rate_period_ms BETWEEN 1 AND 86400000),
  ADD CONSTRAINT queue_limits_per_key_rate_form CHECK (
    (per_key_rate_count IS NULL) = (per_key_rate_period_ms IS NULL)
    AND per_key_rate_count BETWEEN 1 AND 10000 AND per_key_rate_period_ms BETWEEN 1 AND 86400000),
  ADD CONSTRAINT queue_limits_per_key_rate_needs_key CHECK (per_key_rate_count IS NULL OR key IS NOT NULL),
  DROP CONSTRAINT queue_limits_some_limit,
  ADD CONSTRAINT queue_limits_some_limit CHECK (concurrency IS NOT NULL OR key IS NOT NULL OR rate_count IS NOT NULL);

-- The last starts of a queue with a `rate`, oldest first.
CREATE TABLE :ONCELY_SCHEMA.queue_rate_windows (
  queue  text          PRIMARY KEY REFERENCES :ONCELY_SCHEMA.queue_limits ON DELETE CASCADE,
  starts timestamptz[] NOT NULL
);

-- The last starts of each key of a queue with a `per_key_rate`, oldest first. A key's row
-- outlives its last start by a rate period at most: maintenance deletes it then.
CREATE TABLE :ONCELY_SCHEMA.key_rate_windows (
  queue  text          NOT NULL REFERENCES :ONCELY_SCHEMA.queue_limits ON DELETE CASCADE,
  key    text          NOT NULL,
  starts timestamptz[] NOT NULL,
  PRIMARY KEY (queue, key)
);

-- A window after new starts: the starts after `since`, the last `keep` of them.
CREATE FUNCTION :ONCELY_SCHEMA.rate_window(starts timestamptz[], since timestamptz, keep integer)
RETURNS timestamptz[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT coalesce(array_agg(s ORDER BY n), '{}')
    FROM (SELECT s, n FROM unnest(starts) WITH ORDINALITY AS u(s, n) WHERE s > since ORDER BY n DESC LIMIT keep) kept
$$;

-- Version 22's set_queue_limits(), with the rates: a call with the first four arguments
-- leaves a queue without rates.
DROP FUNCTION :ONCELY_SCHEMA.set_queue_limits(text, integer, text, integer);
CREATE FUNCTION :ONCELY_SCHEMA.set_queue_limits(queue text, concurrency integer, key text,
                                                per_key_concurrency integer,
                                                rate_count integer DEFAULT NULL, rate_period interval DEFAULT NULL,
                                                per_key_rate_count integer DEFAULT NULL,
                                                per_key_rate_period interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  limits :ONCELY_SCHEMA.queue_limits;
BEGIN
  IF $2 IS NULL AND $3 IS NULL AND $4 IS NULL AND $5 IS NULL AND $6 IS NULL AND $7 IS NULL AND $8 IS NULL THEN
    DELETE FROM :ONCELY_SCHEMA.queue_limits l WHERE l.queue = $1;
    RETURN;
  END IF;
  LOCK TABLE :ONCELY_SCHEMA.jobs IN SHARE ROW EXCLUSIVE MODE;
  INSERT INTO :ONCELY_SCHEMA.queue_limits AS l (queue, concurrency, key, per_key_concurrency, rate_count,
                                                rate_period_ms, per_key_rate_count, per_key_rate_period_ms)
  VALUES ($1, $2, $3, $4, $5, (extract(epoch FROM $6) * 1000)::bigint, $7, (extract(epoch FROM $8) * 1000)::bigint)
  ON CONFLICT (queue) DO UPDATE
     SET concurrency = EXCLUDED.concurrency, key = EXCLUDED.key,
         per_key_concurrency = EXCLUDED.per_key_concurrency, rate_count = EXCLUDED.rate_count,
         rate_period_ms = EXCLUDED.rate_period_ms, per_key_rate_count = EXCLUDED.per_key_rate_count,
         per_key_rate_period_ms = EXCLUDED.per_key_rate_period_ms, updated_at = now()
  RETURNING l.* INTO limits;
  UPDATE :ONCELY_SCHEMA.jobs j
     SET concurrency_key = coalesce(j.payload #>> limits.key_path, '')
   WHERE j.queue = $1 AND j.concurrency_key IS NULL;
END
$$;

-- The keys of a queue's jobs: a walk of the index of keyed jobs, one descent per key.
CREATE FUNCTION :ONCELY_SCHEMA.queue_keys(queue text) RETURNS SETOF text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  WITH RECURSIVE keys(k) AS (
    SELECT min(j.concurrency_key) FROM :ONCELY_SCHEMA.jobs j WHERE j.queue = $1 AND j.concurrency_key IS NOT NULL
    UNION ALL
    SELECT (SELECT min(j.concurrency_key) FROM :ONCELY_SCHEMA.jobs j
             WHERE j.queue = $1 AND j.concurrency_key > keys.k)
      FROM keys
     WHERE keys.k IS NOT NULL
  )
  SELECT keys.k FROM keys WHERE keys.k IS NOT NULL
$$;

-- The ready jobs of a keyed lease queue, a few of each key, read without locking them: the
-- lease claim locks only the rows it takes (locking each key's first jobs wrote a lock into
-- as many rows as the queue has keys, on every claim). Each key's first ready jobs in claim
-- order, at most key_rooms->key of them, or `per_key` for a key it does not name, each with
-- its turn (1 for its key's first job, 2 for the second, ...). A job whose idempotency key
-- another job's live lease holds is passed over, as in lease_lock_in_order(). (A leased job
-- is not ready: its run_at is its lease's expiry.)
CREATE FUNCTION :ONCELY_SCHEMA.ready_by_key(queue text, per_key integer, key_rooms jsonb)
RETURNS TABLE (id bigint, k text, turn bigint, priority smallint, run_at timestamptz, kind text, idempotency_key text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT r.id, keys.k, r.turn, r.priority, r.run_at, r.kind, r.idempotency_key
    FROM :ONCELY_SCHEMA.queue_keys($1) AS keys(k) CROSS JOIN LATERAL (
      SELECT j.id, row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS turn, j.priority, j.run_at, j.kind,
             j.idempotency_key
        FROM :ONCELY_SCHEMA.jobs j
       WHERE j.queue = $1 AND j.concurrency_key = keys.k AND j.run_at <= now()
         AND (j.idempotency_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM :ONCELY_SCHEMA.jobs o
                WHERE o.kind = j.kind AND o.idempotency_key = j.idempotency_key
                  AND o.lease_token IS NOT NULL AND o.run_at > now()))
       ORDER BY j.priority, j.run_at, j.id
       LIMIT greatest(0, coalesce(($3 ->> keys.k)::integer, $2))
    ) r
$$;

-- Version 22's lease_lock_ready(), with the rates, and fair across claims.
-- - The room a claim has is also what the queue's rate window leaves, and with a key what
--   each key's window leaves; the claim records its starts in the windows it read, in its
--   own transaction (a claim that rolls back started nothing). The instant of the starts is
--   clock_timestamp() once the claim has its turn: the claims of a queue take turns, so the
--   windows' starts are in order.
-- - Fairness: a key's jobs are ranked by their turn plus the key's running jobs, so that a
--   key with fewer jobs running goes first, in this claim and the next. (Ranked by turn
--   alone, a claim with room for one job took the oldest key's first job every time, and a
--   key enqueued behind a long backlog waited for all of it.)
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.lease_lock_ready(queue text, max_jobs integer, after_priority smallint,
                                                           after_run_at_us bigint, after_id bigint)
RETURNS TABLE (id bigint, priority smallint, run_at_us bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  limits :ONCELY_SCHEMA.queue_limits;
  room integer;
  started_at timestamptz;
  taken_ids bigint[];
  taken_keys text[];
  taken_priorities smallint[];
  taken_run_at_us bigint[];
BEGIN
  SELECT l.* INTO limits FROM :ONCELY_SCHEMA.queue_limits l WHERE l.queue = $1;
  IF NOT FOUND THEN
    RETURN QUERY SELECT * FROM :ONCELY_SCHEMA.lease_lock_in_order($1, $2, $3, $4, $5);
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock(1869505389, hashtext(':ONCELY_SCHEMA' || E'\x1f' || $1));  -- 'oncm': a limited queue's claims
  room := $2;
  IF limits.concurrency IS NOT NULL THEN
    SELECT least(room, limits.concurrency - count(*))::integer INTO room
      FROM :ONCELY_SCHEMA.jobs j
     WHERE j.queue = $1 AND j.concurrency_key IS NOT NULL AND j.lease_token IS NOT NULL AND j.run_at > now();
  END IF;
  started_at := clock_timestamp();
  -- The instant the rates count this claim's starts at, for the rest of its transaction to
  -- read (what a start is, observed from outside the windows).
  PERFORM set_config('oncely.claim_started_at', started_at::text, true);
  IF limits.rate_count IS NOT NULL THEN
    SELECT least(room, limits.rate_count - count(*))::integer INTO room
      FROM :ONCELY_SCHEMA.queue_rate_windows w CROSS JOIN unnest(w.starts) AS s
     WHERE w.queue = $1 AND s > started_at - limits.rate_period_ms * interval '1 millisecond';
  END IF;
  IF room <= 0 THEN
    RETURN;
  END IF;
  IF limits.key IS NULL THEN
    -- From the caller's claim start, as a claim without limits: the burn-down's completed
    -- jobs leave their index entries at the head of the queue until a vacuum, and a claim
    -- from the head steps over all of them (the C++ claim start goes back to the head in
    -- its turn, execution/claim_start.hpp).
    SELECT array_agg(r.id), array_agg(r.priority), array_agg(r.run_at_us)
      INTO taken_ids, taken_priorities, taken_run_at_us
      FROM :ONCELY_SCHEMA.lease_lock_in_order($1, room, $3, $4, $5) r;
  ELSE
    WITH running AS (
      SELECT j.concurrency_key AS k, count(*)::integer AS n
        FROM :ONCELY_SCHEMA.jobs j
       WHERE j.queue = $1 AND j.concurrency_key IS NOT NULL AND j.lease_token IS NOT NULL AND j.run_at > now()
       GROUP BY j.concurrency_key
    ), started AS (
      SELECT w.key AS k, count(*)::integer AS n
        FROM :ONCELY_SCHEMA.key_rate_windows w CROSS JOIN unnest(w.starts) AS s
       WHERE limits.per_key_rate_count IS NOT NULL
         AND w.queue = $1 AND s > started_at - limits.per_key_rate_period_ms * interval '1 millisecond'
       GROUP BY w.key
    ), key_rooms AS (
      -- What each key that runs or started jobs has left; NULL where it has no such limit.
      SELECT coalesce(jsonb_object_agg(coalesce(running.k, started.k),
                                       least(room, limits.per_key_concurrency - coalesce(running.n, 0),
                                             limits.per_key_rate_count - coalesce(started.n, 0))), '{}') AS rooms
        FROM running FULL JOIN started ON started.k = running.k
    ), candidates AS MATERIALIZED (
      SELECT c.*, c.turn + coalesce(running.n, 0) AS rank
        FROM key_rooms
       CROSS JOIN :ONCELY_SCHEMA.ready_by_key($1, least(room, limits.per_key_concurrency, limits.per_key_rate_count),
                                              key_rooms.rooms) c
        LEFT JOIN running ON running.k = c.k
    ), locked AS (
      SELECT c.* FROM candidates c JOIN :ONCELY_SCHEMA.jobs j ON j.id = c.id AND j.run_at <= now()
       ORDER BY c.rank, c.priority, c.run_at, c.id
       LIMIT room
         FOR UPDATE OF j SKIP LOCKED
    ), taken AS (
      SELECT locked.* FROM locked
       WHERE locked.idempotency_key IS NULL
          OR pg_try_advisory_xact_lock(1869505388, hashtext(locked.kind || E'\x1f' || locked.idempotency_key))
    )
    SELECT array_agg(t.id ORDER BY t.priority, t.run_at, t.id), array_agg(t.k ORDER BY t.priority, t.run_at, t.id),
           array_agg(t.priority ORDER BY t.priority, t.run_at, t.id),
           array_agg(CASE WHEN isfinite(t.run_at) THEN (extract(epoch FROM t.run_at) * 1000000)::bigint END
                     ORDER BY t.priority, t.run_at, t.id)
      INTO taken_ids, taken_keys, taken_priorities, taken_run_at_us
      FROM taken t;
  END IF;
  IF taken_ids IS NULL THEN
    RETURN;
  END IF;
  -- The slots taken, per key, for the slots this transaction frees to be matched against at
  -- its commit (on_limited_slot_freed()).
  PERFORM set_config('oncely.slots_retaken', (
    SELECT jsonb_object_agg(r.slot, r.n)::text
      FROM (SELECT e.slot, sum(e.n)::integer AS n
              FROM (SELECT t.key AS slot, t.value::integer AS n
                      FROM jsonb_each_text(coalesce(nullif(current_setting('oncely.slots_retaken', true), ''),
                                                    '{}')::jsonb) t
                    UNION ALL
                    SELECT $1 || E'\x1f' || coalesce(t.k, ''), 1 FROM unnest(taken_ids, taken_keys) AS t(id, k)) e
             GROUP BY e.slot) r), true);
  IF limits.rate_count IS NOT NULL THEN
    INSERT INTO :ONCELY_SCHEMA.queue_rate_windows AS w (queue, starts)
    VALUES ($1, :ONCELY_SCHEMA.rate_window(array_fill(started_at, ARRAY[cardinality(taken_ids)]),
                                           '-infinity', limits.rate_count))
    ON CONFLICT ON CONSTRAINT queue_rate_windows_pkey DO UPDATE
       SET starts = :ONCELY_SCHEMA.rate_window(w.starts || EXCLUDED.starts,
                                               started_at - limits.rate_period_ms * interval '1 millisecond',
                                               limits.rate_count);
  END IF;
  IF limits.per_key_rate_count IS NOT NULL THEN
    INSERT INTO :ONCELY_SCHEMA.key_rate_windows AS w (queue, key, starts)
    SELECT $1, t.k, :ONCELY_SCHEMA.rate_window(array_fill(started_at, ARRAY[count(*)::integer]),
                                               '-infinity', limits.per_key_rate_count)
      FROM unnest(taken_keys) AS t(k)
     GROUP BY t.k
    ON CONFLICT ON CONSTRAINT key_rate_windows_pkey DO UPDATE
       SET starts = :ONCELY_SCHEMA.rate_window(w.starts || EXCLUDED.starts,
                                               started_at - limits.per_key_rate_period_ms * interval '1 millisecond',
                                               limits.per_key_rate_count);
  END IF;
  RETURN QUERY SELECT * FROM unnest(taken_ids, taken_priorities, taken_run_at_us);
END
$$;

-- A free slot of `key` among its `per_key` slots, taken by the calling transaction: whether
-- there was one. A slot is a transaction-scoped advisory lock (see lock_ready_limited()). A
-- transaction takes one slot of a key at most: advisory locks are re-entrant, and a second
-- try of the same slot would succeed.
CREATE FUNCTION :ONCELY_SCHEMA.lock_key_slot(slots_of text, key text, per_key integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  FOR slot IN 1..per_key LOOP
    IF pg_try_advisory_xact_lock(1869505390, hashtext(slots_of || key || E'\x1f' || slot)) THEN  -- 'oncn'
      RETURN true;
    END IF;
  END LOOP;
  RETURN false;
END
$$;

-- The claim of a transaction-mode queue with limits (the C++ transaction-mode claim calls it
-- first, then claims the jobs it returns by id): locks up to max_jobs ready jobs of `queue`
-- that get their slots, and returns their ids in claim order. A transaction-mode job runs
-- inside its claim's transaction and holds no lease: its slots are transaction-scoped
-- advisory locks, slot i of the queue (1..concurrency) and slot i of its key
-- (1..per_key_concurrency), held until that transaction ends, however it ends: a worker that
-- dies, freezes past its job_timeout or loses the database gives them back with its
-- transaction. A batch runs its jobs one after another: it takes one slot of the queue, and
-- each of its jobs a slot of its key (the C++ claim takes one job at a time under a per-key
-- limit, so that a batch holds no key it is not running).
-- - The queue's slot comes first, before any job is chosen: a claim that waits for one locks
--   no job meanwhile, and picks its jobs when it has its turn, among the keys ready then.
--   (Locking first, the claims queued on a full queue each held the job they had picked
--   before a new key arrived, and that key waited for all of them.) When the queue has no
--   slot left the claim may `wait`, up to that long, for one slot (picked at random) to come
--   back, and takes it. A slot comes back when its transaction ends, committed, rolled back
--   or ended by the death of its worker, which no NOTIFY announces: waiting on the slot
--   itself, the claim wakes at that instant.
-- - Then the jobs, one at a time, each the first ready job not locked by another claim (a
--   running job's row is locked by its batch): of the queue, or with a key, one job of each
--   key, the keys in a random order. One job per key: the batch's jobs commit together, and
--   a batch of one key's backlog would hold a newer key's job behind all of it.
-- - A keyed claim takes the key's slot before it locks the key's next job, and passes over
--   a key with no slot left (a job it locked would stay locked until its transaction ends,
--   out of reach of the claim that would run it next).
-- - `only_ids`: those jobs only (crash suspects claimed apart).
-- - A single row NULL says the claim took nothing for want of a slot of the queue (after
--   waiting, when it could): the caller may claim again at once, to wait on a slot again,
--   rather than poll.
-- Call it once per transaction: the slots a transaction holds are its jobs'. Rates apply to
-- lease queues only: a queue with one is refused (SQLSTATE OC104).
CREATE FUNCTION :ONCELY_SCHEMA.lock_ready_limited(queue text, max_jobs integer, only_ids bigint[] DEFAULT NULL,
                                                  wait interval DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  limits :ONCELY_SCHEMA.queue_limits;
  keyed boolean;
  keys text[] := '{}';
  job_id bigint;
  job_key text;
  taken integer := 0;
  ready_by timestamptz;
  slot integer;
  got boolean;
  slots_of text := ':ONCELY_SCHEMA' || E'\x1f' || $1 || E'\x1f';
  lock_timeout_was text := current_setting('lock_timeout');
BEGIN
  SELECT l.* INTO limits FROM :ONCELY_SCHEMA.queue_limits l WHERE l.queue = $1;
  IF limits.rate_count IS NOT NULL OR limits.per_key_rate_count IS NOT NULL THEN
    RAISE EXCEPTION 'queue % has a rate limit, which applies to lease queues only', quote_literal($1)
      USING ERRCODE = 'OC104', HINT = format('Make it a lease queue: oncely queue set %s mode=lease', $1);
  END IF;
  -- A slot of the queue, for the whole batch.
  IF limits.concurrency IS NOT NULL THEN
    got := false;
    slot := 1;
    WHILE NOT got AND slot <= limits.concurrency LOOP
      got := pg_try_advisory_xact_lock(1869505391, hashtext(slots_of || slot));  -- 'onco'
      slot := slot + 1;
    END LOOP;
    IF NOT got AND $4 IS NOT NULL THEN
      BEGIN
        PERFORM set_config('lock_timeout', ceil(extract(epoch FROM $4) * 1000)::bigint::text, true);
        PERFORM pg_advisory_xact_lock(1869505391,
                                      hashtext(slots_of || (1 + floor(random() * limits.concurrency)::integer)));
        PERFORM set_config('lock_timeout', lock_timeout_was, true);
        got := true;
      EXCEPTION WHEN lock_not_available THEN
        got := false;  -- (the block's rollback restored lock_timeout)
      END;
    END IF;
    IF NOT got THEN
      RETURN NEXT NULL;  -- held back: every slot of the queue is held
      RETURN;
    END IF;
  END IF;
  keyed := limits.key IS NOT NULL AND $3 IS NULL;  -- no row (its limits just removed): a claim in order
  IF NOT keyed THEN
    IF $3 IS NULL THEN
      -- Without a key, the queue's first ready jobs, locked in one scan: no slot but the
      -- queue's to take.
      RETURN QUERY SELECT r.id FROM :ONCELY_SCHEMA.lease_lock_in_order($1, $2, NULL, NULL, NULL) AS r;
      RETURN;
    END IF;
    FOREACH job_id IN ARRAY $3 LOOP
      EXIT WHEN taken >= $2;
      SELECT j.concurrency_key INTO job_key FROM :ONCELY_SCHEMA.jobs j WHERE j.id = job_id;
      CONTINUE WHEN limits.key IS NOT NULL AND job_key = ANY (keys);  -- one job per key
      CONTINUE WHEN job_key IS NOT NULL AND limits.per_key_concurrency IS NOT NULL
                    AND NOT :ONCELY_SCHEMA.lock_key_slot(slots_of, job_key, limits.per_key_concurrency);
      PERFORM FROM :ONCELY_SCHEMA.jobs j WHERE j.id = job_id AND j.queue = $1 FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND;
      keys := keys || job_key;
      taken := taken + 1;
      RETURN NEXT job_id;
    END LOOP;
    RETURN;
  END IF;
  -- Ready by now, not by the transaction's start: a claim that waited for its slot also
  -- takes the jobs enqueued meanwhile.
  ready_by := clock_timestamp();
  keys := ARRAY(SELECT k FROM :ONCELY_SCHEMA.queue_keys($1) AS k ORDER BY random());
  FOREACH job_key IN ARRAY keys LOOP
    EXIT WHEN taken >= $2;
    -- A slot of its key, before a job of the key is locked (see above).
    CONTINUE WHEN limits.per_key_concurrency IS NOT NULL
                  AND NOT :ONCELY_SCHEMA.lock_key_slot(slots_of, job_key, limits.per_key_concurrency);
    -- The key's first ready job not locked by another claim.
    SELECT j.id INTO job_id FROM :ONCELY_SCHEMA.jobs j
     WHERE j.queue = $1 AND j.concurrency_key = job_key AND j.run_at <= ready_by
     ORDER BY j.priority, j.run_at, j.id
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    taken := taken + 1;
    RETURN NEXT job_id;
  END LOOP;
END
$$;

-- How long a worker whose claim of `queue` came back short should wait before it claims
-- again, when no commit will wake it: until the queue's or one of its keys' rate windows
-- lets a start in, or the first live lease of a concurrency-limited queue expires (a worker
-- that died holding it sends nothing). Only instants to come: a full window that has
-- already moved on holds nothing back. NULL when the queue has no limits or nothing holds it
-- back but the lack of ready jobs, for which a new job's NOTIFY wakes the worker.
CREATE FUNCTION :ONCELY_SCHEMA.limits_retry_in(queue text) RETURNS interval
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT greatest(interval '0', held.next_room - clock_timestamp())
    FROM (SELECT least(
                   (SELECT w.starts[1] + l.rate_period_ms * interval '1 millisecond'
                      FROM :ONCELY_SCHEMA.queue_rate_windows w
                     WHERE w.queue = l.queue AND cardinality(w.starts) >= l.rate_count
                       AND w.starts[1] > clock_timestamp() - l.rate_period_ms * interval '1 millisecond'),
                   (SELECT min(w.starts[1]) + l.per_key_rate_period_ms * interval '1 millisecond'
                      FROM :ONCELY_SCHEMA.key_rate_windows w
                     WHERE w.queue = l.queue AND cardinality(w.starts) >= l.per_key_rate_count
                       AND w.starts[1] > clock_timestamp() - l.per_key_rate_period_ms * interval '1 millisecond'),
                   (SELECT min(j.run_at)
                      FROM :ONCELY_SCHEMA.jobs j
                     WHERE (l.concurrency IS NOT NULL OR l.per_key_concurrency IS NOT NULL)
                       AND j.queue = l.queue AND j.concurrency_key IS NOT NULL AND j.lease_token IS NOT NULL
                       AND j.run_at > now())) AS next_room
            FROM :ONCELY_SCHEMA.queue_limits l
           WHERE l.queue = $1) held
   WHERE held.next_room IS NOT NULL
$$;

-- What the limits hold back now, per limited queue (`queue` NULL: every one), for `oncely
-- stats`, `queue show`, the console and the metrics: the jobs running (holding a slot), the
-- ready jobs the limits keep waiting, and the keys at their limit. A lease-mode job runs while
-- its lease is live; a transaction-mode batch runs one job at a time while its claim's
-- transaction holds its slot (the advisory locks of lock_ready_limited(), read from pg_locks:
-- an operator's question, not a claim's), and the other jobs of the batch, claimed but not
-- running yet, count as waiting. A ready job is held back when its queue is at its
-- concurrency or its rate, or its key at its per-key concurrency or rate.
CREATE FUNCTION :ONCELY_SCHEMA.queue_limits_held(queue text DEFAULT NULL)
RETURNS TABLE (queue text, running bigint, held_back bigint, keys_at_limit bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  WITH limited AS (
    SELECT l.*, coalesce(p.mode = 'lease', false) AS lease, ':ONCELY_SCHEMA' || E'\x1f' || l.queue || E'\x1f' AS slots_of,
           (SELECT count(*) FROM :ONCELY_SCHEMA.queue_rate_windows w CROSS JOIN unnest(w.starts) AS s
             WHERE w.queue = l.queue AND s > clock_timestamp() - l.rate_period_ms * interval '1 millisecond') AS started
      FROM :ONCELY_SCHEMA.queue_limits l LEFT JOIN :ONCELY_SCHEMA.queue_policies p ON p.queue = l.queue
     WHERE $1 IS NULL OR l.queue = $1
  ), slot_locks AS (
    SELECT k.classid::bigint AS class, k.objid::bigint AS slot
      FROM pg_locks k
     WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
       AND k.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND k.classid::bigint IN (1869505390, 1869505391)
  ), per_key AS (
    SELECT j.queue, j.concurrency_key AS key,
           count(*) FILTER (WHERE j.lease_token IS NOT NULL AND j.run_at > now()) AS leased,
           count(*) FILTER (WHERE j.lease_token IS NULL AND j.run_at <= now()) AS ready
      FROM :ONCELY_SCHEMA.jobs j
     WHERE j.concurrency_key IS NOT NULL AND j.queue IN (SELECT limited.queue FROM limited)
     GROUP BY j.queue, j.concurrency_key
  ), keys AS (
    SELECT k.queue, k.key, k.ready,
           CASE WHEN q.lease THEN k.leased
                ELSE (SELECT count(*) FROM generate_series(1, coalesce(q.per_key_concurrency, 0)) AS i
                        JOIN slot_locks s ON s.class = 1869505390
                         AND s.slot = hashtext(q.slots_of || k.key || E'\x1f' || i)::bigint & 4294967295) END AS running,
           (SELECT count(*) FROM :ONCELY_SCHEMA.key_rate_windows w CROSS JOIN unnest(w.starts) AS s
             WHERE w.queue = k.queue AND w.key = k.key
               AND s > clock_timestamp() - q.per_key_rate_period_ms * interval '1 millisecond') AS started
      FROM per_key k JOIN limited q ON q.queue = k.queue
  ), keys_held AS (
    SELECT k.*, greatest(k.ready - CASE WHEN q.lease THEN 0 ELSE k.running END, 0) AS waiting,
           coalesce(k.running >= q.per_key_concurrency, false)
             OR coalesce(k.started >= q.per_key_rate_count, false) AS at_limit
      FROM keys k JOIN limited q ON q.queue = k.queue
  ), queues AS (
    SELECT q.queue,
           CASE WHEN q.lease OR q.concurrency IS NULL
                THEN (SELECT coalesce(sum(k.running), 0) FROM keys k WHERE k.queue = q.queue)
                ELSE (SELECT count(*) FROM generate_series(1, q.concurrency) AS i
                        JOIN slot_locks s ON s.class = 1869505391
                         AND s.slot = hashtext(q.slots_of || i)::bigint & 4294967295) END AS running,
           q.lease, q.concurrency, q.started >= q.rate_count AS rate_full
      FROM limited q
  )
  SELECT q.queue, q.running::bigint,
         CASE WHEN coalesce(q.running >= q.concurrency, false) OR coalesce(q.rate_full, false)
              -- The whole queue waits: every ready job (a transaction-mode job's row stays
              -- ready while it runs).
              THEN greatest((SELECT coalesce(sum(k.ready), 0) FROM keys k WHERE k.queue = q.queue)
                            - CASE WHEN q.lease THEN 0 ELSE q.running END, 0)
              ELSE (SELECT coalesce(sum(k.waiting), 0) FROM keys_held k WHERE k.queue = q.queue AND k.at_limit)
         END::bigint,
         (SELECT count(*) FROM keys_held k WHERE k.queue = q.queue AND k.at_limit)
    FROM queues q
   ORDER BY q.queue
$$;

-- The wake-up: a limited queue's job that leaves (completed, dead-lettered, cancelled) or is
-- given back (failed, released; its lease_token cleared, or a transaction-mode job, which
-- has none, retried) frees a slot at commit. The triggers are deferred to the commit, where
-- they know whether their own transaction took the slot again: a C++ lease queue settles its
-- finished jobs and claims in one transaction, and a slot it frees and takes back in it
-- needs no other worker (lease_lock_ready() counts what it takes, per key, in
-- oncely.slots_retaken). Notified on every settlement, the workers of a busy queue each
-- woke for a claim that found nothing.
CREATE FUNCTION :ONCELY_SCHEMA.on_limited_slot_freed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  retaken jsonb := nullif(current_setting('oncely.slots_retaken', true), '')::jsonb;
  slot text := OLD.queue || E'\x1f' || OLD.concurrency_key;
  left_to_match integer := coalesce((retaken ->> slot)::integer, 0);
BEGIN
  IF left_to_match > 0 THEN
    PERFORM set_config('oncely.slots_retaken', jsonb_set(retaken, ARRAY[slot], to_jsonb(left_to_match - 1))::text,
                       true);
    RETURN NULL;
  END IF;
  -- One per queue and transaction: PostgreSQL folds equal notifications of a transaction.
  PERFORM pg_notify(TG_TABLE_SCHEMA || '.jobs', OLD.queue);
  RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER jobs_limited_slot_freed_by_delete
  AFTER DELETE ON :ONCELY_SCHEMA.jobs DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (OLD.concurrency_key IS NOT NULL)
  EXECUTE FUNCTION :ONCELY_SCHEMA.on_limited_slot_freed();

CREATE CONSTRAINT TRIGGER jobs_limited_slot_freed_by_update
  AFTER UPDATE ON :ONCELY_SCHEMA.jobs DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (OLD.concurrency_key IS NOT NULL AND NEW.lease_token IS NULL)
  EXECUTE FUNCTION :ONCELY_SCHEMA.on_limited_slot_freed();
