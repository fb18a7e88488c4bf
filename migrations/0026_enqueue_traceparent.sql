-- oncely schema, version 26: enqueue() takes the producer's trace context.
--
-- A job's W3C traceparent (jobs.trace_context, version 8) is what its attempts' spans hang
-- from (docs/opentelemetry.md). A plain INSERT could store it, enqueue() could not, so a
-- client that enqueues through the function (the Python and TypeScript clients) could not
-- start its job's trace without writing the function's defaults a second time. A new
-- signature, as in versions 9 and 24: the old one goes, and `oncely migrate` grants the new
-- one to the roles again. A job with a unique_key stores no trace context:
-- enqueue_unique() may hand back or replace another live job, whose trace is not this one.
DROP FUNCTION :ONCELY_SCHEMA.enqueue(text, jsonb, text, text, timestamptz, integer, integer, text, text, bigint[],
                                     bigint);
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
  batch_id        bigint      DEFAULT NULL,
  traceparent     text        DEFAULT NULL
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
                                          depends_on, batch_id, trace_context)
    VALUES ($1, coalesce($2, '{}'), coalesce($3, 'default'), $4, coalesce($5, now()), coalesce($6, 0)::smallint, $7,
            nullif($10, '{}'), $11, $12)
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
