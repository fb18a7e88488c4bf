-- Version 21: the fenced completion says which leases it completed (by token), and a lease
-- costs the server less: the index of leased keys holds keyed jobs only, and the completion
-- deletes the held rows without locking them first.
--
-- jobs_leased_key_idx serves one question, asked by the lease claim (lease_lock_ready() and
-- lease_locked()) for a job with a key: "is another copy of this key leased right now?". A
-- job without a key never asks it, yet until now every lease of one added an entry
-- (kind, NULL): a leased job's new row version goes into every index whose predicate it
-- matches. All of those entries share one value per kind, so each lease landed on the same
-- few leaf pages and the B-tree's deduplication of equal entries rewrote their posting lists
-- again and again. Measured on a no-op lease burn-down of keyless jobs (one session,
-- lease_jobs() and complete_jobs() of 1,000 at a time, autovacuum off, the backend's own
-- CPU): 30 µs of server CPU per job before, 25 µs after.
--
-- The claim's look-ups compare idempotency_key with =, which implies IS NOT NULL, so the
-- planner still uses this index for them. Building it scans jobs once under a SHARE lock
-- (enqueues wait: 0.7 s on 10 million jobs on the test machine); the
-- entries it holds are only the jobs leased at that moment.
DROP INDEX :ONCELY_SCHEMA.jobs_leased_key_idx;
CREATE INDEX jobs_leased_key_idx ON :ONCELY_SCHEMA.jobs (kind, idempotency_key)
  WHERE lease_token IS NOT NULL AND idempotency_key IS NOT NULL;

-- complete_leases() as in version 19, with two changes.
--
-- It returns each completed job's lease_token too. A caller that settles a batch must know
-- which of its leases completed, and a job id does not say: a worker may lease a job again
-- while an attempt of its expired lease still runs, and settle both attempts in one batch.
-- Matched by id, the stale attempt passed for the live one, and its effects were applied
-- without its completion, then again by the attempt that completed the job (a C++ lease
-- queue, a row of the batch locked by another transaction for longer than the lease).
--
-- And it no longer locks the rows with a FOR UPDATE before its DELETE: the DELETE locks each
-- row itself, so the lock wrote every row (and a WAL record) twice. That lock also set the
-- order in which rows were locked, ascending ids, the order of the statements that lock held
-- rows and wait (a C++ worker's release and its lock before a settlement with effects or
-- failures); no statement that waits for a held row now conflicts with a completion's
-- DELETE: the C++ renewal and the protocol's renew_leases() skip locked rows, and a job is
-- released or settled once. Measured with two TypeScript workers on 200,000 no-op jobs
-- (prefetch 2000), 3 runs interleaved: 31.8 -> 30.2 us of server CPU per job (medians),
-- 43,000 -> 44,300 jobs/s.
DROP FUNCTION :ONCELY_SCHEMA.complete_leases(bigint[], bigint[]);
CREATE FUNCTION :ONCELY_SCHEMA.complete_leases(ids bigint[], tokens bigint[])
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
END
$$;
