-- oncely schema, version 8: a job carries its producer's W3C trace context.
--
-- jobs.trace_context is a `traceparent` header value ("00-<32 hex trace id>-<16 hex span
-- id>-<2 hex flags>"), set by whoever enqueues the job (plain SQL too) or left NULL. It is
-- kept through retries (the row is the same), copied into dead_letters, and from there
-- into a replayed job, so one trace id follows a job through every attempt.

-- Nullable without a default: adding it rewrites nothing, whatever the table holds.
ALTER TABLE :ONCELY_SCHEMA.jobs ADD COLUMN trace_context text;
ALTER TABLE :ONCELY_SCHEMA.dead_letters ADD COLUMN trace_context text;

-- The format of the W3C Trace Context recommendation: version ff is invalid, version 00 is
-- exactly 55 characters (later versions may append "-..." fields), and an all-zero trace or
-- span id is invalid. Lower-case hex only, as the recommendation requires. NOT VALID: the
-- existing rows (all NULL) are not scanned; every new or updated row is checked.
ALTER TABLE :ONCELY_SCHEMA.jobs
  ADD CONSTRAINT jobs_trace_context_is_traceparent CHECK (
    trace_context ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?$'
    AND left(trace_context, 2) <> 'ff'
    AND (left(trace_context, 2) <> '00' OR length(trace_context) = 55)
    AND substr(trace_context, 4, 32) <> repeat('0', 32)
    AND substr(trace_context, 37, 16) <> repeat('0', 16)
    AND length(trace_context) <= 512) NOT VALID;
