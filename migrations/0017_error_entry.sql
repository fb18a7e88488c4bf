-- oncely schema, version 17: one definition of a job's errors[] entry.
--
-- Every failure appends one entry to jobs.errors (and the dead letter keeps the list): a
-- retry, a dead-letter move, a crashed attempt folded back, a lease that expired. The entry
-- was spelled out in each of those statements; it is this function now, which the SQL worker
-- protocol's fail_job() uses too, so an entry reads the same whichever worker wrote it.
--   attempt  the attempt that failed (1-based)
--   at       when it failed (statement_timestamp() in the failing statement: now() would be
--            the claim's time, a handler's run earlier)
--   error    the message; class: the failure's class (docs/operations.md, "Failure classes")
--   stack    where a C++ handler's exception was thrown (a JSON array), or NULL: omitted
-- IMMUTABLE but for the text of `at`, which follows the session's TimeZone as any timestamptz
-- turned into JSON does: STABLE. It reads and writes nothing, so every role may call it, as
-- any built-in function (unlike the schema's other functions, version 11; `oncely migrate`
-- keeps it so): a worker role granted its tables by hand keeps working.
CREATE FUNCTION :ONCELY_SCHEMA.error_entry(attempt integer, at timestamptz, error text, class text,
                                           stack jsonb DEFAULT NULL) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT jsonb_build_object('attempt', attempt, 'at', at, 'error', error, 'class', class)
         || jsonb_strip_nulls(jsonb_build_object('stack', stack))
$$;
