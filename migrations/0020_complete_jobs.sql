-- Version 20: complete_jobs(), the SQL worker protocol's completion of many jobs at once, for
-- handlers that wrote nothing to fence (a no-op, a mail or a webhook with its idempotency
-- key): one statement and one commit for a batch instead of a transaction per job, as the
-- C++ lease settlement does. A job with database effects still needs complete_job() in the
-- transaction that holds them; complete_jobs() has no effects to roll back, so a lease that
-- was lost is not an error here: its pair is just not returned.

-- Completes every (id, token) pair whose lease is still the caller's: the fenced delete and
-- marker of complete_leases() (the one owner of that rule), then the bookkeeping that
-- complete_job() does per job, per queue here: a C++ worker's exec or http job leaves its
-- token for its worker to count, any other job is counted as the protocol worker's outcome.
-- A job whose key another copy processed first is completed too (its marker stays the
-- other copy's) and counted as completed: telling it apart would cost complete_leases() a
-- look-up per job, and lease_jobs() never leases two copies of one key at once.
-- Returns the ids completed; a pair not returned was not held (expired and taken, released,
-- or settled), and nothing was done for it.
CREATE FUNCTION :ONCELY_SCHEMA.complete_jobs(ids bigint[], lease_tokens bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  done_ids bigint[];
  done_queues text[];
  by_cpp_worker boolean[];
BEGIN
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'complete_jobs: ids and lease_tokens must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF cardinality($1) <> cardinality($2) THEN
    RAISE EXCEPTION 'complete_jobs: % ids but % lease tokens', cardinality($1), cardinality($2)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF cardinality($1) > 10000 THEN
    RAISE EXCEPTION 'complete_jobs: % jobs in one call; at most 10000', cardinality($1)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.queue), '{}'),
         coalesce(array_agg(c.leased_by IS NOT NULL), '{}')
    INTO done_ids, done_queues, by_cpp_worker
    FROM :ONCELY_SCHEMA.complete_leases($1, $2) c;
  INSERT INTO :ONCELY_SCHEMA.lease_completions (lease_token, job_id)
  SELECT DISTINCT ON (d.id) h.token, d.id
    FROM unnest(done_ids, by_cpp_worker) AS d(id, cpp)
    JOIN unnest($1, $2) AS h(id, token) ON h.id = d.id
   WHERE d.cpp;
  PERFORM :ONCELY_SCHEMA.count_protocol_outcome(d.queue, count(*), 0, 0, 0)
     FROM unnest(done_queues, by_cpp_worker) AS d(queue, cpp)
    WHERE NOT d.cpp
    GROUP BY d.queue;
  RETURN QUERY SELECT unnest(done_ids);
END
$$;
