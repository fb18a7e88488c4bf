-- oncely schema, version 24: dependencies and batches whose follow-up exists exactly once.
--
-- A job may name parents (`depends_on`, job ids): it waits, never claimed, until every
-- parent has completed. A job may belong to a batch (`batch_id`, from open_batch()): when
-- the batch is closed and its last member has settled, the batch's callback jobs are
-- enqueued. Both follow-ups move in the transaction that settles the parent or the member,
-- the one that writes its dedup marker or its dead letter: whatever crashes, a child is
-- released once and a callback enqueued once. No poller, no leader.
--
-- Who does what:
-- - The insert trigger on_jobs_inserted_dependents() takes new jobs that name parents or a
--   batch: it resolves the parents (a parent replayed from a dead letter is its replay), makes
--   the job wait for those still to run, and counts the batch's members.
-- - settle_dependents(ids, outcome) is what a settled job owes: its batch's counters, and its
--   children (released when it completed, dead-lettered when it did not). Every path that
--   settles a job calls it: the transaction-mode completion, the fenced completion
--   (complete_leases(), so complete_job() and complete_jobs() too), the lease claim's removal
--   of duplicates, and the dead-letter move (failures, cancels). It acts only on jobs that have
--   left the jobs table and deletes the rows it acts on, so a second call does nothing: any
--   role may call it, as a built-in.
-- - A job without parents or batch pays, at its settlement, a look at two tables that are
--   empty unless batches or dependencies are in use; at its enqueue, a scan of the
--   statement's new rows.
--
-- Waiting. A waiting job's run_at is the last instant run_at may hold (9999-12-31), so that
-- no claim reaches it: every claim takes jobs whose run_at has come, and none changes for
-- this. The run_at its producer asked for is kept in run_after and restored, or now if that
-- has passed, when the last parent completes.
--
-- Concurrency. A producer naming a parent that a worker is completing at that instant must
-- not miss the release: the producer locks each parent row FOR KEY SHARE before it records
-- the dependency, which the completion's DELETE waits for (and the producer, if the DELETE
-- came first, waits for it and then finds the parent gone: completed). The claims therefore
-- lock FOR NO KEY UPDATE (the lock an UPDATE takes), which a KEY SHARE does not conflict
-- with: a running transaction-mode job does not hold its child's producer back.
-- A producer adding members to a batch holds a shared advisory lock on the batch until it
-- commits, and reads the batch FOR KEY SHARE; close_batch() takes the lock exclusively, so it
-- waits for the producers in flight and those after it see the batch closed. Neither touches
-- the lock a settlement takes (the counters' UPDATE of the batch's row): a producer's open
-- transaction never holds a worker's completion back.
-- Counters and children are locked in id order, so two settlements never deadlock.
--
-- Cycles cannot be built: a parent's id is lower than its child's (parents exist before their
-- children), and depends_on is written at enqueue only.

-- 1. Columns. NULL for every job without parents or batch.
ALTER TABLE :ONCELY_SCHEMA.jobs
  ADD COLUMN depends_on   bigint[],
  ADD COLUMN parents_left integer,
  ADD COLUMN run_after    timestamptz,
  ADD COLUMN batch_id     bigint;
ALTER TABLE :ONCELY_SCHEMA.jobs ADD CONSTRAINT jobs_depends_on_size
  CHECK (cardinality(depends_on) <= 10000) NOT VALID;
CREATE INDEX jobs_batch_idx ON :ONCELY_SCHEMA.jobs (batch_id, id) WHERE batch_id IS NOT NULL;

-- A dead letter keeps what its replay needs: the parents (resolved again at the replay), and
-- the batch it settled in (shown; a replay runs outside the batch, which counted it already).
ALTER TABLE :ONCELY_SCHEMA.dead_letters
  ADD COLUMN depends_on bigint[],
  ADD COLUMN batch_id   bigint;
-- A parent is looked for among the dead letters by its job id.
CREATE INDEX dead_letters_job_id_idx ON :ONCELY_SCHEMA.dead_letters (job_id);

-- 2. The dependencies still open: child_id waits for parent_id. Deleted when the parent
-- settles.
CREATE TABLE :ONCELY_SCHEMA.job_parents (
  parent_id bigint NOT NULL,
  child_id  bigint NOT NULL,
  PRIMARY KEY (parent_id, child_id)
);

-- 3. Batches. A callback is a job description: {"kind", "payload" (an object), "queue",
-- "key", "priority", "max_attempts"}; its payload gets batch_id, completed and dead.
CREATE TABLE :ONCELY_SCHEMA.batches (
  id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  on_success       jsonb,
  on_failure       jsonb,
  on_finish        jsonb,
  completed        integer     NOT NULL DEFAULT 0,
  dead             integer     NOT NULL DEFAULT 0,
  created_at       timestamptz NOT NULL DEFAULT now(),
  created_by       text        NOT NULL DEFAULT current_user,
  closed_at        timestamptz,
  finished_at      timestamptz,
  callback_job_ids bigint[],
  CONSTRAINT batches_counts CHECK (completed >= 0 AND dead >= 0),
  CONSTRAINT batches_finished_when_closed CHECK (finished_at IS NULL OR closed_at IS NOT NULL)
);
CREATE INDEX batches_unfinished_idx ON :ONCELY_SCHEMA.batches (id) WHERE finished_at IS NULL;

-- The members not settled yet: a member's row goes when it settles, and with it the chance
-- of counting it twice. A batch's members are its completed, its dead and these.
CREATE TABLE :ONCELY_SCHEMA.batch_members (
  job_id   bigint PRIMARY KEY,
  batch_id bigint NOT NULL
);
CREATE INDEX batch_members_batch_idx ON :ONCELY_SCHEMA.batch_members (batch_id);

-- 4. A callback description, checked when the batch is opened (what: its argument's name).
CREATE FUNCTION :ONCELY_SCHEMA.checked_job_description(description jsonb, what text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  unknown text;
BEGIN
  IF $1 IS NULL OR jsonb_typeof($1) = 'null' THEN
    RETURN NULL;
  END IF;
  IF jsonb_typeof($1) <> 'object' THEN
    RAISE EXCEPTION '%: a job description is a JSON object, not %', $2, jsonb_typeof($1)
      USING ERRCODE = 'invalid_parameter_value', HINT = 'For example {"kind": "report", "queue": "default"}.';
  END IF;
  SELECT k INTO unknown FROM jsonb_object_keys($1) AS k
   WHERE k NOT IN ('kind', 'payload', 'queue', 'key', 'priority', 'max_attempts') LIMIT 1;
  IF unknown IS NOT NULL THEN
    RAISE EXCEPTION '%: unknown field % (kind, payload, queue, key, priority, max_attempts)', $2, quote_literal(unknown)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF jsonb_typeof($1 -> 'kind') IS DISTINCT FROM 'string' OR $1 ->> 'kind' = '' THEN
    RAISE EXCEPTION '%: "kind" must be a non-empty string', $2 USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF $1 ? 'payload' AND jsonb_typeof($1 -> 'payload') <> 'object' THEN
    RAISE EXCEPTION '%: "payload" must be a JSON object (batch_id, completed and dead are added to it)', $2
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF ($1 ? 'queue' AND (jsonb_typeof($1 -> 'queue') <> 'string' OR $1 ->> 'queue' = ''))
     OR ($1 ? 'key' AND (jsonb_typeof($1 -> 'key') <> 'string' OR $1 ->> 'key' = '')) THEN
    RAISE EXCEPTION '%: "queue" and "key" must be non-empty strings', $2
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF $1 ->> 'kind' ~ '[[:cntrl:]]' OR $1 ->> 'queue' ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION '%: "kind" and "queue" must not hold control characters', $2
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The jobs table's bounds (version 5), checked now rather than when the callback is
  -- enqueued, in the transaction that settles the last member.
  IF octet_length($1 ->> 'kind') > 255 OR octet_length($1 ->> 'queue') > 128 OR octet_length($1 ->> 'key') > 1024 THEN
    RAISE EXCEPTION '%: "kind" may have at most 255 bytes, "queue" 128 and "key" 1024', $2
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF ($1 ? 'priority' AND (jsonb_typeof($1 -> 'priority') <> 'number'
                           OR ($1 ->> 'priority')::numeric NOT BETWEEN -32768 AND 32767
                           OR ($1 ->> 'priority')::numeric <> trunc(($1 ->> 'priority')::numeric)))
     OR ($1 ? 'max_attempts' AND (jsonb_typeof($1 -> 'max_attempts') <> 'number'
                                  OR ($1 ->> 'max_attempts')::numeric NOT BETWEEN 1 AND 1000000
                                  OR ($1 ->> 'max_attempts')::numeric <> trunc(($1 ->> 'max_attempts')::numeric))) THEN
    RAISE EXCEPTION '%: "priority" must be an integer of -32768..32767 and "max_attempts" one of 1..1000000', $2
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN $1;
END
$$;

-- Opens a batch and returns its id, for members to be enqueued with. Each callback is a job
-- description or NULL: on_success runs when no member was dead-lettered, on_failure when
-- one was, on_finish either way. SECURITY DEFINER: a producer opens and closes batches, and
-- writes nothing else of them.
CREATE FUNCTION :ONCELY_SCHEMA.open_batch(on_success jsonb DEFAULT NULL, on_failure jsonb DEFAULT NULL,
                                          on_finish jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  INSERT INTO :ONCELY_SCHEMA.batches (on_success, on_failure, on_finish, created_by)
  VALUES (:ONCELY_SCHEMA.checked_job_description($1, 'on_success'),
          :ONCELY_SCHEMA.checked_job_description($2, 'on_failure'),
          :ONCELY_SCHEMA.checked_job_description($3, 'on_finish'), session_user)
  RETURNING id
$$;

-- Enqueues the callbacks of `batch_id` if it is closed and every member has settled, once:
-- the caller holds the batch's row lock (the counters' UPDATE, or close_batch()'s), and
-- finished_at is set here. Two callers race for the row: the second sees the first's
-- settled member gone once the first has committed.
CREATE FUNCTION :ONCELY_SCHEMA.finish_batch_if_settled(batch_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  b :ONCELY_SCHEMA.batches;
  ids bigint[];
BEGIN
  SELECT * INTO b FROM :ONCELY_SCHEMA.batches WHERE id = $1;
  IF NOT FOUND OR b.closed_at IS NULL OR b.finished_at IS NOT NULL
     OR EXISTS (SELECT FROM :ONCELY_SCHEMA.batch_members m WHERE m.batch_id = b.id) THEN
    RETURN;
  END IF;
  WITH callbacks AS (
    SELECT c.which, c.description FROM (VALUES ('on_success', b.on_success, b.dead = 0),
                                               ('on_failure', b.on_failure, b.dead > 0),
                                               ('on_finish', b.on_finish, true)) AS c(which, description, due)
     WHERE c.due AND c.description IS NOT NULL
  ), enqueued AS (
    INSERT INTO :ONCELY_SCHEMA.jobs (kind, payload, queue, idempotency_key, priority, max_attempts)
    SELECT c.description ->> 'kind',
           coalesce(c.description -> 'payload', '{}')
             || jsonb_build_object('batch_id', b.id, 'completed', b.completed, 'dead', b.dead),
           coalesce(c.description ->> 'queue', 'default'),
           coalesce(c.description ->> 'key', format('oncely-batch-%s-%s', b.id, c.which)),
           coalesce((c.description ->> 'priority')::numeric::smallint, 0),
           (c.description ->> 'max_attempts')::numeric::integer
      FROM callbacks c
    RETURNING id
  )
  SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO ids FROM enqueued;
  UPDATE :ONCELY_SCHEMA.batches SET finished_at = now(), callback_job_ids = ids WHERE id = b.id;
END
$$;

-- Closes `batch_id`: no member may join it from then on, and its callbacks are enqueued when
-- its last member settles (at once if they all have). Closing a closed batch does nothing.
CREATE FUNCTION :ONCELY_SCHEMA.close_batch(batch_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- After the producers adding members now (they hold the lock shared until they commit).
  PERFORM pg_advisory_xact_lock(1869505378, hashtext(':ONCELY_SCHEMA' || E'\x1f' || $1::text));  -- 'oncb'
  UPDATE :ONCELY_SCHEMA.batches b SET closed_at = now() WHERE b.id = $1 AND b.closed_at IS NULL;
  IF NOT FOUND THEN
    IF NOT EXISTS (SELECT FROM :ONCELY_SCHEMA.batches b WHERE b.id = $1) THEN
      RAISE EXCEPTION 'batch % does not exist', $1 USING ERRCODE = 'no_data_found';
    END IF;
    RETURN;
  END IF;
  PERFORM :ONCELY_SCHEMA.finish_batch_if_settled($1);
END
$$;

-- 5. Settling. Children of completed parents: each edge from a parent that has left the jobs
-- table goes, and a child whose last edge went becomes ready (a NOTIFY wakes the workers).
CREATE FUNCTION :ONCELY_SCHEMA.release_children(parent_ids bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  children bigint[];
  counts integer[];
  ready_queues text;
BEGIN
  WITH edges AS (
    DELETE FROM :ONCELY_SCHEMA.job_parents p
     WHERE p.parent_id = ANY ($1) AND NOT EXISTS (SELECT FROM :ONCELY_SCHEMA.jobs j WHERE j.id = p.parent_id)
    RETURNING p.child_id
  )
  SELECT array_agg(e.child_id ORDER BY e.child_id), array_agg(e.n ORDER BY e.child_id) INTO children, counts
    FROM (SELECT child_id, count(*)::integer AS n FROM edges GROUP BY child_id) e;
  IF children IS NULL THEN
    RETURN;
  END IF;
  PERFORM FROM :ONCELY_SCHEMA.jobs j WHERE j.id = ANY (children) ORDER BY j.id FOR NO KEY UPDATE;
  WITH released AS (
    UPDATE :ONCELY_SCHEMA.jobs j
       SET parents_left = CASE WHEN j.parents_left > c.n THEN j.parents_left - c.n END,
           run_at = CASE WHEN j.parents_left > c.n THEN j.run_at ELSE greatest(j.run_after, clock_timestamp()) END,
           run_after = CASE WHEN j.parents_left > c.n THEN j.run_after END
      FROM unnest(children, counts) AS c(id, n)
     WHERE j.id = c.id AND j.parents_left IS NOT NULL
    RETURNING j.queue, j.parents_left, j.run_at
  )
  SELECT string_agg(DISTINCT r.queue, ',') INTO ready_queues
    FROM released r WHERE r.parents_left IS NULL AND r.run_at <= clock_timestamp();
  IF ready_queues IS NOT NULL THEN
    -- The channel the workers listen on, <schema>.jobs, with the schema's name as it is.
    PERFORM pg_notify(n.nspname || '.jobs', CASE WHEN octet_length(ready_queues) > 7000 THEN '*' ELSE ready_queues END)
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE c.oid = ':ONCELY_SCHEMA.jobs'::regclass;
  END IF;
END
$$;

-- Children of parents that were dead-lettered or cancelled: every waiting descendant goes to
-- dead_letters too, with the class dependency_failed (cancelled, when its parent was). The
-- edges of the whole subtree go first, so that each descendant's own dead-letter move finds
-- nothing more to do (no recursion, however deep the chain).
CREATE FUNCTION :ONCELY_SCHEMA.fail_children(parent_ids bigint[], outcome text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  doomed bigint[];
  via bigint[];
BEGIN
  WITH RECURSIVE descendants(id, via) AS (
    SELECT p.child_id, p.parent_id FROM :ONCELY_SCHEMA.job_parents p
     WHERE p.parent_id = ANY ($1) AND NOT EXISTS (SELECT FROM :ONCELY_SCHEMA.jobs j WHERE j.id = p.parent_id)
    UNION
    SELECT p.child_id, p.parent_id FROM :ONCELY_SCHEMA.job_parents p JOIN descendants d ON p.parent_id = d.id
  )
  SELECT array_agg(f.id ORDER BY f.id), array_agg(f.via ORDER BY f.id) INTO doomed, via
    FROM (SELECT DISTINCT ON (d.id) d.id, d.via FROM descendants d ORDER BY d.id, d.via) f;
  DELETE FROM :ONCELY_SCHEMA.job_parents p
   WHERE (p.parent_id = ANY ($1) AND NOT EXISTS (SELECT FROM :ONCELY_SCHEMA.jobs j WHERE j.id = p.parent_id))
      OR p.parent_id = ANY (doomed);
  PERFORM :ONCELY_SCHEMA.dead_letter_children(doomed, via, $2);
END
$$;

-- Dead-letters the waiting jobs `children`, each because of its parent in `via` (outcome:
-- that parent's, 'dead' or 'cancelled').
CREATE FUNCTION :ONCELY_SCHEMA.dead_letter_children(children bigint[], via bigint[], outcome text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  FOR i IN 1 .. coalesce(cardinality($1), 0) LOOP
    PERFORM :ONCELY_SCHEMA.dead_letter_job(
              $1[i], NULL,
              format('job %s, which this job depends on, %s', $2[i],
                     CASE WHEN $3 = 'cancelled' THEN 'was cancelled' ELSE 'did not complete' END),
              CASE WHEN $3 = 'cancelled' THEN 'cancelled' ELSE 'dependency_failed' END, NULL,
              jsonb_build_object('parent_job_id', $2[i]));
  END LOOP;
END
$$;

-- What the settled jobs `ids` owe (outcome: 'completed', 'dead' or 'cancelled'): their batches'
-- counters, then their children. Only jobs that have left the jobs table count (see the top).
CREATE FUNCTION :ONCELY_SCHEMA.settle_dependents(ids bigint[], outcome text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  batch_ids bigint[];
  counts integer[];
  i integer;
BEGIN
  IF $2 IS NULL OR $2 NOT IN ('completed', 'dead', 'cancelled') THEN
    RAISE EXCEPTION 'settle_dependents: outcome % is none of completed, dead, cancelled', quote_literal($2)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Both tables are empty unless some batch is under way or some job waits: one page's look
  -- then, where the probes of a settlement's every id cost 0.4 ms for 500 of them.
  IF EXISTS (SELECT FROM :ONCELY_SCHEMA.batch_members)
     AND EXISTS (SELECT FROM :ONCELY_SCHEMA.batch_members m WHERE m.job_id = ANY ($1)) THEN
    WITH settled AS (
      DELETE FROM :ONCELY_SCHEMA.batch_members m
       WHERE m.job_id = ANY ($1) AND NOT EXISTS (SELECT FROM :ONCELY_SCHEMA.jobs j WHERE j.id = m.job_id)
      RETURNING m.batch_id
    )
    SELECT array_agg(s.batch_id ORDER BY s.batch_id), array_agg(s.n ORDER BY s.batch_id) INTO batch_ids, counts
      FROM (SELECT batch_id, count(*)::integer AS n FROM settled GROUP BY batch_id) s;
    FOR i IN 1 .. coalesce(cardinality(batch_ids), 0) LOOP
      UPDATE :ONCELY_SCHEMA.batches b
         SET completed = b.completed + CASE WHEN $2 = 'completed' THEN counts[i] ELSE 0 END,
             dead = b.dead + CASE WHEN $2 = 'completed' THEN 0 ELSE counts[i] END
       WHERE b.id = batch_ids[i];
      PERFORM :ONCELY_SCHEMA.finish_batch_if_settled(batch_ids[i]);
    END LOOP;
  END IF;
  IF EXISTS (SELECT FROM :ONCELY_SCHEMA.job_parents)
     AND EXISTS (SELECT FROM :ONCELY_SCHEMA.job_parents p WHERE p.parent_id = ANY ($1)) THEN
    IF $2 = 'completed' THEN
      PERFORM :ONCELY_SCHEMA.release_children($1);
    ELSE
      PERFORM :ONCELY_SCHEMA.fail_children($1, $2);
    END IF;
  END IF;
END
$$;

-- 6. Enqueueing. Where the parent `id` stands now: 'pending' (in jobs: locked FOR KEY SHARE
-- until the caller's transaction ends), 'completed', 'dead' or 'cancelled', with the job it
-- resolved to (a dead letter's replay, followed). An id the jobs sequence never handed out
-- is an error.
CREATE FUNCTION :ONCELY_SCHEMA.resolve_parent(id bigint, OUT resolved bigint, OUT state text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  handed_out constant bigint := coalesce(pg_sequence_last_value(':ONCELY_SCHEMA.jobs_id_seq'::regclass), 0);
  dead record;
BEGIN
  resolved := $1;
  LOOP
    PERFORM FROM :ONCELY_SCHEMA.jobs j WHERE j.id = resolved FOR KEY SHARE;
    IF FOUND THEN
      state := 'pending';
      RETURN;
    END IF;
    SELECT d.replayed_job_id, d.error_class INTO dead
      FROM :ONCELY_SCHEMA.dead_letters d WHERE d.job_id = resolved ORDER BY d.id DESC LIMIT 1;
    IF FOUND AND dead.replayed_job_id IS NOT NULL THEN
      resolved := dead.replayed_job_id;
    ELSIF FOUND THEN
      state := CASE WHEN dead.error_class = 'cancelled' THEN 'cancelled' ELSE 'dead' END;
      RETURN;
    ELSIF resolved < 1 OR resolved > handed_out THEN
      RAISE EXCEPTION 'job % does not exist', $1
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'jobs_depends_on_exists',
              HINT = 'depends_on names parents by the job ids their enqueue returned.';
    ELSIF current_setting('transaction_isolation') <> 'read committed' THEN
      -- This transaction's snapshot may predate the parent: it cannot tell a completed parent
      -- from one committed since.
      RAISE EXCEPTION 'job % is not queued in this transaction''s snapshot: a % transaction cannot tell a completed parent from one enqueued after it began', $1, current_setting('transaction_isolation')
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Enqueue jobs with depends_on in a READ COMMITTED transaction (PostgreSQL''s default).';
    ELSE
      -- Handed out, and neither queued nor dead-lettered: it completed (or was a duplicate of
      -- a key processed already).
      state := 'completed';
      RETURN;
    END IF;
  END LOOP;
END
$$;

-- The insert trigger for jobs that name a batch or parents (see the top). For every other
-- statement: one scan of its new rows.
CREATE FUNCTION :ONCELY_SCHEMA.on_jobs_inserted_dependents() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  any_batch boolean;
  any_parents boolean;
  joined record;
  batch_closed_at timestamptz;
  child record;
  parent_id bigint;
  parent record;
  pending bigint[];
  resolved bigint[];
  failed_via bigint;
  failed_state text;
  doomed bigint[] := '{}';
  doomed_via bigint[] := '{}';
  cancelled bigint[] := '{}';
  cancelled_via bigint[] := '{}';
BEGIN
  SELECT bool_or(n.batch_id IS NOT NULL), bool_or(n.depends_on IS NOT NULL) INTO any_batch, any_parents
    FROM new_jobs n;
  IF NOT (any_batch OR any_parents) THEN
    RETURN NULL;
  END IF;
  -- enqueue_unique() may replace a waiting job (and its run_at) or a member: not for these.
  IF EXISTS (SELECT FROM new_jobs n WHERE n.unique_key IS NOT NULL AND (n.depends_on IS NOT NULL OR n.batch_id IS NOT NULL)) THEN
    RAISE EXCEPTION 'a job with a unique_key cannot have depends_on or a batch_id'
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Use an idempotency_key for a dependent job.';
  END IF;
  IF any_batch THEN
    FOR joined IN SELECT DISTINCT n.batch_id FROM new_jobs n WHERE n.batch_id IS NOT NULL ORDER BY n.batch_id LOOP
      -- Shared with the other producers, until this transaction ends; close_batch() waits for it.
      PERFORM pg_advisory_xact_lock_shared(1869505378, hashtext(':ONCELY_SCHEMA' || E'\x1f' || joined.batch_id::text));
      -- KEY SHARE: the settlements' UPDATE of the counters is not held back by it; a REPEATABLE
      -- READ producer whose snapshot predates the batch's closing fails to serialize.
      SELECT b.closed_at INTO batch_closed_at FROM :ONCELY_SCHEMA.batches b WHERE b.id = joined.batch_id FOR KEY SHARE;
      IF NOT FOUND THEN
        RAISE EXCEPTION 'batch % does not exist', joined.batch_id
          USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'jobs_batch_exists',
                HINT = 'A batch id is what open_batch() returned.';
      ELSIF batch_closed_at IS NOT NULL THEN
        RAISE EXCEPTION 'batch % is closed: no job may join it any more', joined.batch_id
          USING ERRCODE = 'OC105', HINT = 'Open a new batch (open_batch()) for more jobs.';
      END IF;
    END LOOP;
    INSERT INTO :ONCELY_SCHEMA.batch_members (job_id, batch_id)
    SELECT n.id, n.batch_id FROM new_jobs n WHERE n.batch_id IS NOT NULL;
  END IF;
  IF NOT any_parents THEN
    RETURN NULL;
  END IF;
  FOR child IN SELECT n.id, n.depends_on FROM new_jobs n WHERE n.depends_on IS NOT NULL ORDER BY n.id LOOP
    pending := '{}';
    resolved := '{}';
    failed_via := NULL;
    FOREACH parent_id IN ARRAY ARRAY(SELECT DISTINCT p FROM unnest(child.depends_on) AS p ORDER BY p) LOOP
      IF parent_id IS NULL THEN
        RAISE EXCEPTION 'job %: depends_on holds a NULL', child.id USING ERRCODE = 'null_value_not_allowed';
      END IF;
      SELECT r.resolved, r.state INTO parent FROM :ONCELY_SCHEMA.resolve_parent(parent_id) r;
      IF parent_id >= child.id THEN
        RAISE EXCEPTION 'job % cannot depend on job %: a parent is a job enqueued before its child', child.id, parent_id
          USING ERRCODE = 'invalid_parameter_value', CONSTRAINT = 'jobs_depends_on_earlier';
      END IF;
      resolved := resolved || parent.resolved;
      IF parent.state = 'pending' THEN
        pending := pending || parent.resolved;
      ELSIF parent.state <> 'completed' AND failed_via IS NULL THEN
        failed_via := parent.resolved;
        failed_state := parent.state;
      END IF;
    END LOOP;
    IF failed_via IS NOT NULL THEN
      UPDATE :ONCELY_SCHEMA.jobs j SET depends_on = resolved WHERE j.id = child.id;
      IF failed_state = 'cancelled' THEN
        cancelled := cancelled || child.id;
        cancelled_via := cancelled_via || failed_via;
      ELSE
        doomed := doomed || child.id;
        doomed_via := doomed_via || failed_via;
      END IF;
    ELSIF cardinality(pending) > 0 THEN
      -- Two ids may resolve to one job (a dead letter's id and its replay's): one edge each.
      pending := ARRAY(SELECT DISTINCT p FROM unnest(pending) AS p ORDER BY p);
      INSERT INTO :ONCELY_SCHEMA.job_parents (parent_id, child_id)
      SELECT p, child.id FROM unnest(pending) AS p ON CONFLICT DO NOTHING;
      UPDATE :ONCELY_SCHEMA.jobs j
         SET depends_on = resolved, parents_left = cardinality(pending), run_after = j.run_at,
             run_at = '9999-12-31 00:00:00+00'
       WHERE j.id = child.id;
    ELSE
      UPDATE :ONCELY_SCHEMA.jobs j SET depends_on = resolved WHERE j.id = child.id AND j.depends_on <> resolved;
    END IF;
  END LOOP;
  -- A child of a parent that did not complete goes where that parent's waiting children went
  -- (taking its own children, named in this statement, with it).
  PERFORM :ONCELY_SCHEMA.dead_letter_children(doomed, doomed_via, 'dead');
  PERFORM :ONCELY_SCHEMA.dead_letter_children(cancelled, cancelled_via, 'cancelled');
  RETURN NULL;
END
$$;

REVOKE EXECUTE ON FUNCTION :ONCELY_SCHEMA.on_jobs_inserted_dependents() FROM PUBLIC;

CREATE TRIGGER jobs_inserted_dependents
  AFTER INSERT ON :ONCELY_SCHEMA.jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :ONCELY_SCHEMA.on_jobs_inserted_dependents();

-- 7. The dead-letter move of version 18, now with the parents and the batch in the dead letter,
-- and what the job owes its batch and its children.
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.dead_letter_job(job_id bigint, attempts integer, error text,
                                                          error_class text, entry_class text, detail jsonb DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  moved :ONCELY_SCHEMA.jobs;
BEGIN
  DELETE FROM :ONCELY_SCHEMA.jobs j WHERE j.id = $1 RETURNING j.* INTO moved;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  INSERT INTO :ONCELY_SCHEMA.dead_letters
         (job_id, queue, kind, payload, idempotency_key, priority, attempts, max_attempts,
          last_error, error_class, errors, error_detail, created_at, origin_job_id, failed_at, trace_context,
          depends_on, batch_id)
  VALUES (moved.id, moved.queue, moved.kind, moved.payload, moved.idempotency_key, moved.priority,
          coalesce($2, moved.attempts), moved.max_attempts, $3, $4,
          moved.errors || CASE WHEN $5 IS NULL THEN '[]'::jsonb
                               ELSE jsonb_build_array(:ONCELY_SCHEMA.error_entry(coalesce($2, moved.attempts),
                                                                                 statement_timestamp(), $3, $5,
                                                                                 $6 -> 'stack')) END,
          coalesce($6, '{}'::jsonb), moved.created_at, coalesce(moved.origin_job_id, moved.id), statement_timestamp(),
          moved.trace_context, moved.depends_on, moved.batch_id);
  PERFORM :ONCELY_SCHEMA.settle_dependents(ARRAY[moved.id], CASE WHEN $4 = 'cancelled' THEN 'cancelled' ELSE 'dead' END);
  RETURN moved.trace_context;
END
$$;

-- 8. The fenced completion of version 21, settling what the completed jobs owe.
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.complete_leases(ids bigint[], tokens bigint[])
RETURNS TABLE (id bigint, kind text, idempotency_key text, queue text, leased_by bigint, lease_token bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
    WITH done AS (
      DELETE FROM :ONCELY_SCHEMA.jobs j USING unnest($1, $2) AS h(id, token)
       WHERE j.id = h.id AND j.lease_token = h.token
      RETURNING j.id, j.kind, j.idempotency_key, j.queue, j.leased_by, j.lease_token
    ), markers AS (
      INSERT INTO :ONCELY_SCHEMA.processed_jobs (kind, idempotency_key, job_id, queue)
      SELECT d.kind, d.idempotency_key, d.id, d.queue FROM done d ORDER BY d.kind, d.idempotency_key
      ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    )
    SELECT d.id, d.kind, d.idempotency_key, d.queue, d.leased_by, d.lease_token FROM done d;
  -- Every pair: those not completed here are still queued (or were settled, with what they
  -- owed, by whoever settled them), which settle_dependents() passes over.
  PERFORM :ONCELY_SCHEMA.settle_dependents($1, 'completed');
END
$$;

-- 9. The lease claim's second statement of version 18: the duplicates it removes completed,
-- as far as their children and batches are concerned (their key was processed).
DO $$
DECLARE
  definition text := pg_get_functiondef(
    ':ONCELY_SCHEMA.lease_locked(bigint[], bigint, text, bigint, integer, text)'::regprocedure);
BEGIN
  -- Appended after the RETURN QUERY: the locked jobs still queued are passed over.
  EXECUTE replace(definition, E'FROM duplicate d;\nEND',
                  E'FROM duplicate d;\n  PERFORM :ONCELY_SCHEMA.settle_dependents($1, ''completed'');\nEND');
  IF pg_get_functiondef(':ONCELY_SCHEMA.lease_locked(bigint[], bigint, text, bigint, integer, text)'::regprocedure)
     NOT LIKE '%settle_dependents%' THEN
    RAISE EXCEPTION 'migration 24: lease_locked() is not the version 18 function it expects';
  END IF;
END
$$;

-- 10. The claims lock FOR NO KEY UPDATE (see the top): the SQL claims are rewritten with that
-- one change (the C++ transaction-mode claims say so themselves).
DO $$
DECLARE
  claim regprocedure;
BEGIN
  FOREACH claim IN ARRAY ARRAY[
      ':ONCELY_SCHEMA.lease_lock_in_order(text, integer, smallint, bigint, bigint)'::regprocedure,
      ':ONCELY_SCHEMA.lease_lock_ready(text, integer, smallint, bigint, bigint)'::regprocedure,
      ':ONCELY_SCHEMA.lock_ready_limited(text, integer, bigint[], interval)'::regprocedure] LOOP
    EXECUTE replace(pg_get_functiondef(claim), 'FOR UPDATE', 'FOR NO KEY UPDATE');
  END LOOP;
END
$$;

-- 11. enqueue() with parents and a batch (a new signature, as in version 9). A unique job
-- cannot wait or join a batch: enqueue_unique() may replace a queued job, which would leave
-- its children and its batch counting a job that is no longer there.
DROP FUNCTION :ONCELY_SCHEMA.enqueue(text, jsonb, text, text, timestamptz, integer, integer, text, text);
CREATE FUNCTION :ONCELY_SCHEMA.enqueue(
  kind            text,
  payload         jsonb       DEFAULT '{}',
  queue           text        DEFAULT 'default',
  idempotency_key text        DEFAULT NULL,
  run_at          timestamptz DEFAULT NULL,
  priority        integer     DEFAULT 0,
  max_attempts    integer     DEFAULT NULL,
  unique_key      text        DEFAULT NULL,
  on_conflict     text        DEFAULT 'skip',
  depends_on      bigint[]    DEFAULT NULL,
  batch_id        bigint      DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  new_id bigint;
  result record;
BEGIN
  IF $8 IS NULL THEN
    INSERT INTO :ONCELY_SCHEMA.jobs AS j (kind, payload, queue, idempotency_key, run_at, priority, max_attempts,
                                          depends_on, batch_id)
    VALUES ($1, coalesce($2, '{}'), coalesce($3, 'default'), $4, coalesce($5, now()), coalesce($6, 0)::smallint, $7,
            nullif($10, '{}'), $11)
    RETURNING j.id INTO new_id;
    RETURN new_id;
  END IF;
  IF $10 IS NOT NULL OR $11 IS NOT NULL THEN
    RAISE EXCEPTION 'enqueue: a job with a unique_key cannot have depends_on or a batch_id'
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Use an idempotency_key for a dependent job.';
  END IF;
  SELECT * INTO result FROM :ONCELY_SCHEMA.enqueue_unique($1, $2, $3, $4, $5, $6, $7, $8, $9);
  IF result.outcome = 'running' THEN
    RAISE NOTICE 'job % (kind %, unique key %) is running: not replaced', result.id, quote_literal($1), quote_literal($8);
  END IF;
  RETURN result.id;
END
$$;
