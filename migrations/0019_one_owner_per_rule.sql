-- oncely schema, version 19: the retry decision and the fenced completion each have one owner,
-- shared by the C++ runtime and the SQL worker protocol.
--
-- Before this version the delay before the next attempt was written twice (the C++
-- runtime's next_delay() and retry_delay() below), and so was the rule that says when a
-- job stops retrying (the C++ runtime's decide() and fail_job()). Both are the functions
-- below now: fail_job() and retry_delay() call them, and so does the C++ runtime's failure
-- write (store/retry_decisions.cpp), which only classifies a failure (which class it is)
-- and passes its queue's backoff. Likewise the fenced completion (part 2).

-- 1. The retry decision.

-- The delay before the next attempt after the `failures`-th failure (below 1 counts as 1):
-- the schedule's entry `failures` (its last one repeating) when there is a schedule, else
-- base * 2^(failures - 1) capped at `cap`, with its jitter: 'full' draws from [0, d],
-- 'equal' from [d/2, d], 'none' is d. `unit_random` is the draw, in [0, 1): random() unless
-- a test passes its own, so the function itself is deterministic.
CREATE FUNCTION :ONCELY_SCHEMA.backoff_delay(base interval, cap interval, jitter text, schedule interval[],
                                             failures integer, unit_random float8 DEFAULT random())
RETURNS interval
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE
           WHEN schedule IS NOT NULL AND cardinality(schedule) > 0
             THEN schedule[least(greatest(failures, 1), cardinality(schedule))]
           ELSE make_interval(secs => CASE jitter
                                        WHEN 'full' THEN d * unit_random
                                        WHEN 'equal' THEN d / 2 + d / 2 * unit_random
                                        ELSE d END)
         END
    -- 2^(n - 1) stops at 2^1000: far past any cap (30 days), and never an overflow.
    FROM (SELECT least(greatest(extract(epoch FROM cap)::float8, 0),
                       greatest(extract(epoch FROM base)::float8, 0) * 2 ^ least(greatest(failures, 1) - 1, 1000))
                   AS d) AS doubling
$$;

-- What becomes of a job whose attempt number `attempt` (the attempts counted, this one
-- included) of at most `max_attempts` failed with `failure_class`: 'retry', or the class of
-- the dead letter it becomes now.
-- - permanent, unknown_kind, unreadable: a dead letter at once, of that class;
-- - the last allowed attempt (or one past it: max_attempts lowered, crashes counted): a
--   dead letter of class 'exhausted', unless it failed in a way worth naming (timeout,
--   crashed, lease_expired), which then is the class;
-- - anything else (retryable, timeout, connection, crashed, ...): 'retry'.
-- The C++ runtime's classes are execution/retry_policy.hpp's FailureClass names.
CREATE FUNCTION :ONCELY_SCHEMA.failure_outcome(failure_class text, attempt integer, max_attempts integer)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE
           WHEN failure_class IN ('permanent', 'unknown_kind', 'unreadable') THEN failure_class
           WHEN attempt >= max_attempts
             THEN CASE WHEN failure_class IN ('timeout', 'crashed', 'lease_expired') THEN failure_class
                       ELSE 'exhausted' END
           ELSE 'retry'
         END
$$;

-- The delay after the n-th failure under `policy`: backoff_delay() with the policy's
-- parameters (this replaces version 18's own copy of the formula).
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.retry_delay(policy :ONCELY_SCHEMA.queue_policies, failures integer)
RETURNS interval
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT :ONCELY_SCHEMA.backoff_delay(policy.backoff_base, policy.backoff_cap, policy.backoff_jitter,
                                      policy.backoff_schedule, failures)
$$;

-- fail_job() as in version 18, its retry-or-dead rule now failure_outcome()'s: a failure the
-- caller says is not retryable is of class 'permanent', any other of class 'retryable'.
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.fail_job(id bigint, lease_token bigint, error text,
                                                   retryable boolean DEFAULT true, retry_in interval DEFAULT NULL,
                                                   detail jsonb DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  job record;
  policy :ONCELY_SCHEMA.queue_policies;
  message constant text := coalesce(nullif($3, ''), '(no error message)');
  failure_class text;
  outcome text;
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
  failure_class := CASE WHEN $4 THEN 'retryable' ELSE 'permanent' END;
  outcome := :ONCELY_SCHEMA.failure_outcome(failure_class, job.attempts,
                                            coalesce(job.max_attempts, policy.max_attempts));
  IF outcome <> 'retry' THEN
    PERFORM :ONCELY_SCHEMA.dead_letter_job(job.id, job.attempts, message, outcome, failure_class, $6);
    PERFORM :ONCELY_SCHEMA.count_protocol_outcome(job.queue, 0, 0, 0, 1);
    RETURN 'dead';
  END IF;
  UPDATE :ONCELY_SCHEMA.jobs j
     SET lease_token = NULL, leased_by = NULL, lease_holder = NULL, last_error = message,
         errors = j.errors || jsonb_build_array(
                    :ONCELY_SCHEMA.error_entry(j.attempts, statement_timestamp(), message, failure_class, $6 -> 'stack')),
         run_at = statement_timestamp() + coalesce($5, :ONCELY_SCHEMA.retry_delay(policy, j.attempts))
   WHERE j.id = job.id;
  PERFORM :ONCELY_SCHEMA.count_protocol_outcome(job.queue, 0, 0, 1, 0);
  RETURN 'retry';
END
$$;

-- 2. The fenced completion, one statement for the C++ runtime's lease settlement (a batch of
-- jobs at a time) and the SQL worker protocol's complete_job() (one job, with its errors on
-- top). Completes the jobs of the pairs (ids[i], tokens[i]) whose lease is still that token:
-- their rows are locked in id order (as every statement that locks held rows: the renewal
-- and the completion of one process never deadlock), deleted, and their dedup markers
-- inserted, one per processed job (a key's, or a job's without one, as the transaction-mode
-- claim inserts them; before this version complete_job() left none for a job without a
-- key). A key processed meanwhile by another copy keeps that copy's marker (DO NOTHING):
-- complete_job() raises OC102 for it, the C++ settlement has nothing to do (its claim
-- deletes such copies before leasing them). Returns the jobs completed; a pair not returned
-- was not the caller's (expired and taken, released, or settled).
-- PL/pgSQL, not SQL: its statement's plan is kept for the session, as the C++ runtime's
-- prepared statement's was. It returns what its callers need and computes nothing more: a
-- per-job "was it marked" column made the C++ settlement's statement twice as slow (500
-- jobs: 9 ms instead of 4.5 ms), so complete_job() looks for its marker itself.
CREATE FUNCTION :ONCELY_SCHEMA.complete_leases(ids bigint[], tokens bigint[])
RETURNS TABLE (id bigint, kind text, idempotency_key text, queue text, leased_by bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
    WITH held AS (
      SELECT j.id FROM unnest($1, $2) AS h(id, token)
        JOIN :ONCELY_SCHEMA.jobs j ON j.id = h.id AND j.lease_token = h.token
       ORDER BY j.id
         FOR UPDATE OF j
    ), done AS (
      DELETE FROM :ONCELY_SCHEMA.jobs j USING held WHERE j.id = held.id
      RETURNING j.id, j.kind, j.idempotency_key, j.queue, j.leased_by
    ), markers AS (
      INSERT INTO :ONCELY_SCHEMA.processed_jobs (kind, idempotency_key, job_id, queue)
      SELECT d.kind, d.idempotency_key, d.id, d.queue FROM done d ORDER BY d.kind, d.idempotency_key
      ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    )
    SELECT d.id, d.kind, d.idempotency_key, d.queue, d.leased_by FROM done d;
END
$$;

-- complete_job() as in version 18, its fenced delete and marker now complete_leases()'s.
CREATE OR REPLACE FUNCTION :ONCELY_SCHEMA.complete_job(id bigint, lease_token bigint, output jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  done record;
BEGIN
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'complete_job: id and lease_token must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  SELECT c.* INTO done FROM :ONCELY_SCHEMA.complete_leases(ARRAY[$1], ARRAY[$2]) c;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'complete_job: job % does not hold lease %: it expired and was taken, was released, or the job was settled',
                    $1, $2
      USING ERRCODE = 'OC101', HINT = 'Roll back: another attempt owns the job now.';
  END IF;
  -- The job's key is ours only if the marker is this job's: another copy's completion
  -- (or claim) that came first kept its own.
  IF done.idempotency_key IS NOT NULL
     AND NOT EXISTS (SELECT FROM :ONCELY_SCHEMA.processed_jobs p
                      WHERE p.kind = done.kind AND p.idempotency_key = done.idempotency_key AND p.job_id = done.id) THEN
    RAISE EXCEPTION 'complete_job: the key of job % (kind %) was processed already', $1, quote_literal(done.kind)
      USING ERRCODE = 'OC102', HINT = 'Roll back and release the job: its next claim deletes it as a duplicate.';
  END IF;
  IF done.leased_by IS NOT NULL THEN
    -- A C++ worker's exec or http handler: its worker counts the completion.
    INSERT INTO :ONCELY_SCHEMA.lease_completions (lease_token, job_id) VALUES ($2, done.id);
  ELSE
    PERFORM :ONCELY_SCHEMA.count_protocol_outcome(done.queue, 1, 0, 0, 0);
  END IF;
END
$$;
