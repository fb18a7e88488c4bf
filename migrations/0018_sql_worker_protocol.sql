-- oncely schema, version 18: queue policy in the database, and the SQL worker protocol.
--
-- 1. Queue policy. One row per queue: how its jobs run (mode, lease), how many attempts they
-- get and how long to wait between them (max_attempts, backoff), how long one attempt may
-- take (job_timeout). A C++ worker started with --config writes its queues' rows (the file
-- wins); `oncely queue set` writes one without a worker; workers in any language read it
-- through the functions below, so every worker of a queue applies the same retry decision.
-- The checks are the configuration file's ranges: a row written by hand is as valid as one
-- a worker wrote. Durations are intervals, as a psql user writes them ('30 seconds').
CREATE TABLE :ONCELY_SCHEMA.queue_policies (
  queue            text        PRIMARY KEY,
  mode             text        NOT NULL,
  lease            interval    NOT NULL,
  max_attempts     integer     NOT NULL,
  backoff_base     interval    NOT NULL,
  backoff_cap      interval    NOT NULL,
  backoff_jitter   text        NOT NULL,
  backoff_schedule interval[],  -- when set: the n-th failure waits backoff_schedule[n], the last repeating
  job_timeout      interval    NOT NULL,
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT queue_policies_queue_name CHECK (queue <> '' AND octet_length(queue) <= 128),
  CONSTRAINT queue_policies_mode CHECK (mode IN ('transaction', 'lease')),
  CONSTRAINT queue_policies_lease_range CHECK (lease BETWEEN interval '3 seconds' AND interval '1 hour'),
  CONSTRAINT queue_policies_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
  CONSTRAINT queue_policies_backoff_base_range CHECK (backoff_base BETWEEN interval '0' AND interval '30 days'),
  CONSTRAINT queue_policies_backoff_cap_range CHECK (backoff_cap BETWEEN interval '0' AND interval '30 days'),
  CONSTRAINT queue_policies_backoff_jitter CHECK (backoff_jitter IN ('full', 'equal', 'none')),
  CONSTRAINT queue_policies_backoff_schedule_range CHECK (
    backoff_schedule IS NULL
    OR (array_ndims(backoff_schedule) = 1 AND cardinality(backoff_schedule) BETWEEN 1 AND 100
        AND array_position(backoff_schedule, NULL) IS NULL
        AND interval '0' <= ALL (backoff_schedule) AND interval '30 days' >= ALL (backoff_schedule))),
  -- A transaction-mode attempt holds its transaction open: at most a day.
  CONSTRAINT queue_policies_job_timeout_range CHECK (
    job_timeout >= interval '1 second'
    AND job_timeout <= CASE WHEN mode = 'lease' THEN interval '7 days' ELSE interval '24 hours' END)
);

-- The policy of `queue`: its row, or the defaults (the configuration file's, stated here
-- once; tests/pg/protocol_pgtest.cpp checks they are the C++ runtime's) for a queue without.
CREATE FUNCTION :ONCELY_SCHEMA.queue_policy(queue text) RETURNS :ONCELY_SCHEMA.queue_policies
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT coalesce(
    (SELECT p FROM :ONCELY_SCHEMA.queue_policies p WHERE p.queue = $1),
    ROW($1, 'transaction', interval '30 seconds', 8, interval '5 seconds', interval '10 minutes', 'equal', NULL,
        interval '5 minutes', now()):::ONCELY_SCHEMA.queue_policies)
$$;

-- The delay after the n-th failure under `policy`: the schedule's entry n (the last one
-- repeating), or base * 2^(n-1) capped, with its jitter (full: [0, d]; equal: [d/2, d]).
-- The C++ runtime's next_delay() (execution/retry_policy.cpp) is the same formula.
CREATE FUNCTION :ONCELY_SCHEMA.retry_delay(policy :ONCELY_SCHEMA.queue_policies, failures integer) RETURNS interval
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE
           WHEN policy.backoff_schedule IS NOT NULL
             THEN policy.backoff_schedule[least(greatest(failures, 1), cardinality(policy.backoff_schedule))]
           ELSE make_interval(secs => CASE policy.backoff_jitter
                                        WHEN 'full' THEN d * random()
                                        WHEN 'equal' THEN d / 2 + d / 2 * random()
                                        ELSE d END)
         END
    FROM (SELECT least(extract(epoch FROM policy.backoff_cap)::float8,
                       extract(epoch FROM policy.backoff_base)::float8 * 2 ^ least(greatest(failures, 1) - 1, 1000))
                   AS d) AS doubling
$$;

-- Renewal and release name a lease by its token alone.
CREATE INDEX jobs_lease_token_idx ON :ONCELY_SCHEMA.jobs (lease_token) WHERE lease_token IS NOT NULL;
-- Handler-side completion: a C++ worker's exec or http handler may complete its job itself,
-- in its own transaction beside its own writes (complete_job() with the token the worker
-- passed it). The worker then finds the job gone: this row tells it that its own lease
-- completed the job (it counts a completion, not a lost lease) and is deleted by it then.
-- Only a C++ worker's leases (leased_by set) leave one; rows a crashed worker never read
-- are pruned by maintenance after a day.
CREATE TABLE :ONCELY_SCHEMA.lease_completions (
  lease_token  bigint      PRIMARY KEY,
  job_id       bigint      NOT NULL,
  completed_at timestamptz NOT NULL DEFAULT now()
);

-- Who holds a lease taken through lease_jobs(), as the worker named itself (a C++ worker's
-- lease names its workers row in leased_by instead).
ALTER TABLE :ONCELY_SCHEMA.jobs ADD COLUMN lease_holder text;

-- 2. The SQL worker protocol (docs/protocol.md): what a worker in any language calls.
-- SQLSTATEs: OC101 the lease is not the caller's (it expired and was taken, was released,
-- or the job was settled already); OC102 the job's key was processed already (another copy
-- completed first); OC103 the queue is not a lease queue; 22023 an argument out of range;
-- 22004 a NULL argument. An error changes nothing, and in complete_job() it rolls back the
-- caller's own writes with it.

-- One protocol worker's outcome counts, for `oncely stats`, the metrics and the console:
-- per connection (slot -pid), so that two workers' transactions never wait on one row.
CREATE FUNCTION :ONCELY_SCHEMA.count_protocol_outcome(queue text, completed bigint, deduplicated bigint,
                                                      retried bigint, dead_lettered bigint, crashed bigint DEFAULT 0)
RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
  INSERT INTO :ONCELY_SCHEMA.job_stats AS s
         (slot_id, minute, queue, completed, deduplicated, retried, dead_lettered, crashed)
  SELECT -pg_backend_pid(), date_trunc('minute', now()), $1, $2, $3, $4, $5, $6
   WHERE $2 + $3 + $4 + $5 + $6 > 0
  ON CONFLICT (slot_id, minute, queue) DO UPDATE
     SET completed = s.completed + EXCLUDED.completed, deduplicated = s.deduplicated + EXCLUDED.deduplicated,
         retried = s.retried + EXCLUDED.retried, dead_lettered = s.dead_lettered + EXCLUDED.dead_lettered,
         crashed = s.crashed + EXCLUDED.crashed
$$;


-- The lease claim, first statement (the C++ lease queues call it too): lock a batch of
-- ready jobs of `queue` in the claim order (the transaction-mode claim's, store/ready_jobs),
-- from the head or after the key (after_priority, after_run_at_us, after_id), and for each
-- job with a key a transaction-scoped lock on that key. Two claims that locked two copies of
-- one key at once cannot both see the other's lease (neither has committed it): the second
-- to ask for the key's lock skips its copy, and once the first commits (which releases the
-- lock) its lease is visible to the next statement that starts. A hash collision only delays
-- a job to the next claim. 1869505388 ('oncl') keeps these locks apart from any other
-- two-key advisory lock. A job whose key a live lease holds is passed over here already
-- (lease_locked() checks it again, with the key lock): copies of a running key at the head
-- of the queue would otherwise fill every claim's LIMIT and keep the jobs behind them
-- waiting until that key's job ended.
CREATE FUNCTION :ONCELY_SCHEMA.lease_lock_ready(queue text, max_jobs integer, after_priority smallint,
                                                after_run_at_us bigint, after_id bigint)
RETURNS TABLE (id bigint, priority smallint, run_at_us bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH RECURSIVE levels(priority) AS (
    SELECT coalesce($3, (-32768)::smallint)
    UNION ALL
    SELECT (SELECT min(j.priority) FROM :ONCELY_SCHEMA.jobs j WHERE j.queue = $1 AND j.priority > levels.priority)
      FROM levels
     WHERE levels.priority IS NOT NULL
  ), ready AS MATERIALIZED (
    SELECT r.* FROM levels CROSS JOIN LATERAL (
      SELECT j.id, j.kind, j.idempotency_key, j.priority, j.run_at
        FROM :ONCELY_SCHEMA.jobs j
       WHERE j.queue = $1 AND j.priority = levels.priority AND j.run_at <= now()
         AND (j.run_at, j.id) > (CASE WHEN levels.priority = $3
                                      THEN 'epoch'::timestamptz + $4 * interval '1 microsecond'
                                      ELSE '-infinity' END,
                                 CASE WHEN levels.priority = $3 THEN $5 ELSE 0 END)
         AND (j.idempotency_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM :ONCELY_SCHEMA.jobs o
                WHERE o.kind = j.kind AND o.idempotency_key = j.idempotency_key
                  AND o.lease_token IS NOT NULL AND o.run_at > now()))
       ORDER BY j.run_at, j.id
       LIMIT $2
         FOR UPDATE SKIP LOCKED
    ) r
    LIMIT $2
  )
  SELECT ready.id, ready.priority,
         CASE WHEN isfinite(ready.run_at) THEN (extract(epoch FROM ready.run_at) * 1000000)::bigint END
    FROM ready
   WHERE ready.idempotency_key IS NULL
      OR pg_try_advisory_xact_lock(1869505388, hashtext(ready.kind || E'\x1f' || ready.idempotency_key))
   ORDER BY ready.priority, ready.run_at, ready.id;
END
$$;

-- The lease claim, second statement: the rows `locked` are locked by this transaction.
-- Duplicates go (their key was processed); a job whose key another job's live lease holds
-- waits; one job per key gets the lease. A job that held an expired lease lost that attempt
-- (its worker died, froze or lost the database): it is recorded, and when no attempt is left
-- the job comes back as 'exhausted', for the caller to dead-letter, rather than run again.
-- The lease's expiry is run_at, on the database's clock: an expired lease is simply a ready
-- job. Rows: 'leased' (with the job), 'exhausted', 'duplicate'.
CREATE FUNCTION :ONCELY_SCHEMA.lease_locked(locked bigint[], worker_id bigint, holder text, lease_ms bigint,
                                            default_max_attempts integer, expired_error text)
RETURNS TABLE (state text, id bigint, kind text, payload text, idempotency_key text, attempts integer,
               max_attempts integer, lease_token bigint, waited_us bigint, origin_job_id bigint,
               took_expired boolean, leased_by bigint, trace_context text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH locked AS MATERIALIZED (
    SELECT j.id, j.kind, j.idempotency_key, j.attempts, j.max_attempts, j.lease_token, j.leased_by, j.priority,
           j.run_at, j.trace_context
      FROM :ONCELY_SCHEMA.jobs j WHERE j.id = ANY ($1)
  ), duplicate AS (
    -- One index probe of processed_jobs per locked job (OFFSET 0 keeps the EXISTS a per-row
    -- probe): written as a join, the planner hashed the whole of processed_jobs at every
    -- claim, a cost that grew with the markers kept.
    DELETE FROM :ONCELY_SCHEMA.jobs j
     WHERE j.id = ANY (ARRAY(
             SELECT l.id FROM locked l
              WHERE l.idempotency_key IS NOT NULL
                AND EXISTS (SELECT 1 FROM :ONCELY_SCHEMA.processed_jobs p
                             WHERE p.kind = l.kind AND p.idempotency_key = l.idempotency_key OFFSET 0)))
    RETURNING j.id, j.kind
  ), free AS (
    SELECT l.* FROM locked l
     WHERE l.id NOT IN (SELECT d.id FROM duplicate d)
       AND (l.idempotency_key IS NULL OR NOT EXISTS (
             SELECT 1 FROM :ONCELY_SCHEMA.jobs o
              WHERE o.kind = l.kind AND o.idempotency_key = l.idempotency_key
                AND o.lease_token IS NOT NULL AND o.id <> l.id AND o.run_at > now()))
  ), chosen AS (
    SELECT DISTINCT ON (coalesce(f.kind || E'\x1f' || f.idempotency_key, f.id::text)) f.*,
           f.lease_token IS NOT NULL AS took_expired,
           f.lease_token IS NOT NULL AND f.attempts >= coalesce(f.max_attempts, $5) AS exhausted
      FROM free f
     ORDER BY coalesce(f.kind || E'\x1f' || f.idempotency_key, f.id::text), f.priority, f.run_at, f.id
  ), leased AS (
    UPDATE :ONCELY_SCHEMA.jobs j
       SET lease_token = nextval(':ONCELY_SCHEMA.lease_tokens'), leased_by = $2, lease_holder = $3,
           attempts = j.attempts + 1,
           run_at = now() + $4 * interval '1 millisecond',
           last_error = CASE WHEN c.took_expired THEN $6 ELSE j.last_error END,
           errors = CASE WHEN c.took_expired
                         THEN j.errors || jsonb_build_array(
                                :ONCELY_SCHEMA.error_entry(j.attempts, now(), $6, 'lease_expired'))
                         ELSE j.errors END
      FROM chosen c
     WHERE j.id = c.id AND NOT c.exhausted
    RETURNING j.id, j.kind, j.payload::text AS payload, j.idempotency_key, j.attempts, j.max_attempts, j.lease_token,
              (extract(epoch FROM now() - j.created_at) * 1000000)::bigint AS waited_us, j.origin_job_id,
              c.took_expired, c.leased_by, j.trace_context
  )
  SELECT 'leased', l.id, l.kind, l.payload, l.idempotency_key, l.attempts, l.max_attempts, l.lease_token, l.waited_us,
         l.origin_job_id, l.took_expired, l.leased_by, l.trace_context
    FROM leased l
  UNION ALL
  SELECT 'exhausted', c.id, c.kind, NULL, c.idempotency_key, c.attempts, c.max_attempts, NULL, NULL, NULL, true,
         c.leased_by, c.trace_context
    FROM chosen c WHERE c.exhausted
  UNION ALL
  SELECT 'duplicate', d.id, d.kind, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false, NULL, NULL FROM duplicate d;
END
$$;

-- Leases up to max_jobs ready jobs of `queue` for `lease` (the policy's when NULL), in the
-- claim order, in the caller's transaction: commit it at once (the lease is that commit).
-- As the C++ lease claim: a duplicate (its key processed) is deleted; one live lease per
-- key; the attempt is counted now; a job whose previous lease expired has that attempt
-- recorded (lease_expired) and, when none is left, goes to the dead letters instead. A
-- paused queue leases nothing. `worker` names the caller in the attempt's record.
CREATE FUNCTION :ONCELY_SCHEMA.lease_jobs(queue text, max_jobs integer, lease interval DEFAULT NULL,
                                          worker text DEFAULT NULL)
RETURNS TABLE (id bigint, kind text, payload jsonb, idempotency_key text, attempt integer, lease_token bigint,
               lease_expires_at timestamptz, trace_context text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  policy :ONCELY_SCHEMA.queue_policies;
  lease_for interval;
  locked bigint[];
  c record;
  dead bigint := 0;
  duplicates bigint := 0;
  expired bigint := 0;
  expired_error constant text := 'lease expired: its worker stopped renewing it (died, froze or lost the database)';
BEGIN
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'lease_jobs: queue and max_jobs must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF $2 NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'lease_jobs: max_jobs must be 1..1000, not %', $2 USING ERRCODE = 'invalid_parameter_value';
  END IF;
  policy := :ONCELY_SCHEMA.queue_policy($1);
  IF policy.mode <> 'lease' THEN
    RAISE EXCEPTION 'lease_jobs: queue % is not a lease queue (its mode is %)', quote_literal($1), policy.mode
      USING ERRCODE = 'OC103', HINT = format('Set its policy: oncely queue set %s mode=lease', $1);
  END IF;
  lease_for := coalesce($3, policy.lease);
  IF lease_for NOT BETWEEN interval '3 seconds' AND interval '1 hour' THEN
    RAISE EXCEPTION 'lease_jobs: lease must be 3 seconds..1 hour, not %', lease_for
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT FROM :ONCELY_SCHEMA.queue_pauses p WHERE p.queue = $1) THEN
    RETURN;
  END IF;
  -- The C++ lease claim's two statements, each with its own snapshot (a VOLATILE
  -- function's statements each see what committed before they began).
  SELECT array_agg(r.id) INTO locked FROM :ONCELY_SCHEMA.lease_lock_ready($1, $2, NULL, NULL, NULL) r;
  IF locked IS NULL THEN
    RETURN;
  END IF;
  FOR c IN SELECT * FROM :ONCELY_SCHEMA.lease_locked(locked, NULL, $4, (extract(epoch FROM lease_for) * 1000)::bigint,
                                                    policy.max_attempts, expired_error) LOOP
    IF c.took_expired THEN
      expired := expired + 1;
    END IF;
    IF c.state = 'leased' THEN
      id := c.id;
      kind := c.kind;
      payload := c.payload::jsonb;
      idempotency_key := c.idempotency_key;
      attempt := c.attempts;
      lease_token := c.lease_token;
      lease_expires_at := now() + lease_for;
      trace_context := c.trace_context;
      RETURN NEXT;
    ELSIF c.state = 'exhausted' THEN
      PERFORM :ONCELY_SCHEMA.dead_letter_job(c.id, c.attempts, expired_error || ', and no attempt is left',
                                             'lease_expired', 'lease_expired',
                                             jsonb_strip_nulls(jsonb_build_object('worker_id', c.leased_by)));
      dead := dead + 1;
    ELSE
      duplicates := duplicates + 1;
    END IF;
  END LOOP;
  PERFORM :ONCELY_SCHEMA.count_protocol_outcome($1, 0, duplicates, 0, dead, expired);
END
$$;

-- The dead-letter move of one job (the C++ runtime's too): out of jobs, into dead_letters,
-- in one statement, never in both and never in neither. attempts: the job's count when NULL;
-- entry_class: the class of the errors[] entry this failure adds (none when NULL); detail:
-- the failure's detail (its "stack", a C++ handler's, goes into that entry too). The time
-- of failure is statement_timestamp() (now() would be the transaction's start, the claim).
-- origin_job_id: a job without a key keeps the key it had (the first job's id) for its
-- replay; trace_context: the replay stays in the producer's trace. Returns the job's
-- trace_context (NULL too when no such job).
CREATE FUNCTION :ONCELY_SCHEMA.dead_letter_job(job_id bigint, attempts integer, error text, error_class text,
                                               entry_class text, detail jsonb DEFAULT NULL) RETURNS text
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
  WITH moved AS (
    DELETE FROM :ONCELY_SCHEMA.jobs WHERE id = $1 RETURNING *
  ), dead AS (
    INSERT INTO :ONCELY_SCHEMA.dead_letters
           (job_id, queue, kind, payload, idempotency_key, priority, attempts, max_attempts,
            last_error, error_class, errors, error_detail, created_at, origin_job_id, failed_at, trace_context)
    SELECT m.id, m.queue, m.kind, m.payload, m.idempotency_key, m.priority, coalesce($2, m.attempts), m.max_attempts,
           $3, $4,
           m.errors || CASE WHEN $5 IS NULL THEN '[]'::jsonb
                            ELSE jsonb_build_array(:ONCELY_SCHEMA.error_entry(coalesce($2, m.attempts), statement_timestamp(),
                                                                              $3, $5, $6 -> 'stack')) END,
           coalesce($6, '{}'::jsonb), m.created_at, coalesce(m.origin_job_id, m.id), statement_timestamp(),
           m.trace_context
      FROM moved m
  )
  SELECT trace_context FROM moved
$$;

-- Completes the job `id` leased with `lease_token`, inside the caller's transaction that
-- holds the job's database effects: the job goes and its key's marker goes in, fenced by the
-- token, committing with those effects or not at all. OC101 when the lease is not the
-- caller's any more, OC102 when the key was processed already: either error aborts the
-- caller's transaction, so its effects cannot be applied twice. (`output` is kept with the
-- completed-job history where that is enabled; without it, it is checked and dropped.)
CREATE FUNCTION :ONCELY_SCHEMA.complete_job(id bigint, lease_token bigint, output jsonb DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  done record;
BEGIN
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'complete_job: id and lease_token must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  DELETE FROM :ONCELY_SCHEMA.jobs j WHERE j.id = $1 AND j.lease_token = $2
  RETURNING j.id, j.kind, j.idempotency_key, j.queue, j.leased_by INTO done;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'complete_job: job % does not hold lease %: it expired and was taken, was released, or the job was settled',
                    $1, $2
      USING ERRCODE = 'OC101', HINT = 'Roll back: another attempt owns the job now.';
  END IF;
  IF done.idempotency_key IS NOT NULL THEN
    INSERT INTO :ONCELY_SCHEMA.processed_jobs (kind, idempotency_key, job_id, queue)
    VALUES (done.kind, done.idempotency_key, done.id, done.queue)
    ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'complete_job: the key of job % (kind %) was processed already', $1, quote_literal(done.kind)
        USING ERRCODE = 'OC102', HINT = 'Roll back and release the job: its next claim deletes it as a duplicate.';
    END IF;
  END IF;
  IF done.leased_by IS NOT NULL THEN
    -- A C++ worker's exec or http handler: its worker counts the completion.
    INSERT INTO :ONCELY_SCHEMA.lease_completions (lease_token, job_id) VALUES ($2, done.id);
  ELSE
    PERFORM :ONCELY_SCHEMA.count_protocol_outcome(done.queue, 1, 0, 0, 0);
  END IF;
END
$$;

-- A failed attempt of the job `id` leased with `lease_token`: the queue's policy decides.
-- Not retryable: a dead letter ('permanent'); the last allowed attempt: a dead letter
-- ('exhausted'); else a retry after `retry_in`, or the policy's backoff. The attempt's error
-- goes into errors[] (with detail's "stack" if any) and detail into the dead letter.
-- Returns 'retry' or 'dead'. OC101 when the lease is not the caller's.
CREATE FUNCTION :ONCELY_SCHEMA.fail_job(id bigint, lease_token bigint, error text, retryable boolean DEFAULT true,
                                        retry_in interval DEFAULT NULL, detail jsonb DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  job record;
  policy :ONCELY_SCHEMA.queue_policies;
  message constant text := coalesce(nullif($3, ''), '(no error message)');
BEGIN
  IF $1 IS NULL OR $2 IS NULL OR $4 IS NULL THEN
    RAISE EXCEPTION 'fail_job: id, lease_token and retryable must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF $5 IS NOT NULL AND $5 NOT BETWEEN interval '0' AND interval '30 days' THEN
    RAISE EXCEPTION 'fail_job: retry_in must be 0..30 days, not %', $5 USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF $6 IS NOT NULL AND jsonb_typeof($6) <> 'object' THEN
    RAISE EXCEPTION 'fail_job: detail must be a JSON object, not %', jsonb_typeof($6)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT j.id, j.queue, j.attempts, j.max_attempts INTO job
    FROM :ONCELY_SCHEMA.jobs j WHERE j.id = $1 AND j.lease_token = $2 FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'fail_job: job % does not hold lease %: it expired and was taken, was released, or the job was settled',
                    $1, $2
      USING ERRCODE = 'OC101', HINT = 'Another attempt owns the job now.';
  END IF;
  policy := :ONCELY_SCHEMA.queue_policy(job.queue);
  IF NOT $4 OR job.attempts >= coalesce(job.max_attempts, policy.max_attempts) THEN
    PERFORM :ONCELY_SCHEMA.dead_letter_job(job.id, job.attempts, message,
                                           CASE WHEN $4 THEN 'exhausted' ELSE 'permanent' END,
                                           CASE WHEN $4 THEN 'retryable' ELSE 'permanent' END, $6);
    PERFORM :ONCELY_SCHEMA.count_protocol_outcome(job.queue, 0, 0, 0, 1);
    RETURN 'dead';
  END IF;
  UPDATE :ONCELY_SCHEMA.jobs j
     SET lease_token = NULL, leased_by = NULL, lease_holder = NULL, last_error = message,
         errors = j.errors || jsonb_build_array(
                    :ONCELY_SCHEMA.error_entry(j.attempts, statement_timestamp(), message, 'retryable', $6 -> 'stack')),
         run_at = statement_timestamp() + coalesce($5, :ONCELY_SCHEMA.retry_delay(policy, j.attempts))
   WHERE j.id = job.id;
  PERFORM :ONCELY_SCHEMA.count_protocol_outcome(job.queue, 0, 0, 1, 0);
  RETURN 'retry';
END
$$;

-- Extends the leases `lease_tokens` by `lease` (each job's queue policy's when NULL) from
-- now; returns the tokens that are lost (their job was settled, released or taken by
-- another claim after the lease expired). A lease whose job is being completed (its row
-- locked by a complete_job() not yet committed) is not waited for: it is not lost.
CREATE FUNCTION :ONCELY_SCHEMA.renew_leases(lease_tokens bigint[], lease interval DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF $1 IS NULL THEN
    RAISE EXCEPTION 'renew_leases: lease_tokens must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF $2 IS NOT NULL AND $2 NOT BETWEEN interval '3 seconds' AND interval '1 hour' THEN
    RAISE EXCEPTION 'renew_leases: lease must be 3 seconds..1 hour, not %', $2 USING ERRCODE = 'invalid_parameter_value';
  END IF;
  WITH held AS (
    SELECT j.id, j.queue FROM :ONCELY_SCHEMA.jobs j
     WHERE j.lease_token = ANY ($1)
     ORDER BY j.id
       FOR UPDATE OF j SKIP LOCKED
  )
  UPDATE :ONCELY_SCHEMA.jobs j
     SET run_at = now() + coalesce($2, (:ONCELY_SCHEMA.queue_policy(held.queue)).lease)
    FROM held WHERE j.id = held.id;
  RETURN QUERY
    SELECT t.token FROM unnest($1) AS t(token)
     WHERE t.token IS NOT NULL
       AND NOT EXISTS (SELECT FROM :ONCELY_SCHEMA.jobs j WHERE j.lease_token = t.token);
END
$$;

-- Gives the jobs of `lease_tokens` back, ready now, without charging their attempt (a
-- worker shutting down); returns how many it gave back. A token no longer held is ignored.
CREATE FUNCTION :ONCELY_SCHEMA.release_jobs(lease_tokens bigint[]) RETURNS integer
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
  WITH held AS (
    SELECT j.id FROM :ONCELY_SCHEMA.jobs j WHERE j.lease_token = ANY ($1) ORDER BY j.id FOR UPDATE OF j
  ), released AS (
    UPDATE :ONCELY_SCHEMA.jobs j
       SET lease_token = NULL, leased_by = NULL, lease_holder = NULL, run_at = now(),
           attempts = greatest(j.attempts - 1, 0)
      FROM held WHERE j.id = held.id
    RETURNING j.id
  )
  SELECT count(*)::integer FROM released
$$;
