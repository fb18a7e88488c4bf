-- oncely schema, version 2: worker registry and the durable record of started attempts.

-- One row per running worker process; removed on clean exit, and by any worker once its
-- heartbeat is stale (the process died).
CREATE TABLE :ONCELY_SCHEMA.workers (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  host           text        NOT NULL,
  pid            integer     NOT NULL,
  queues         text[]      NOT NULL,
  started_at     timestamptz NOT NULL DEFAULT now(),
  heartbeat_at   timestamptz NOT NULL DEFAULT now(),
  jobs_in_flight integer     NOT NULL DEFAULT 0
);

-- Crash-safe attempt counting. Each worker thread owns one row. Before it runs the
-- handlers of a claimed batch it writes the batch's job ids here and COMMITs, on a
-- connection of its own (so the write survives whatever happens to the job transaction);
-- the job transaction empties the row again in the COMMIT that completes the batch.
-- A job id found here in another row once its row lock has been acquired therefore marks an
-- attempt whose transaction never finished: the worker was killed, crashed or lost its
-- connection. That attempt is counted, so a job that kills its worker every time ends in
-- dead_letters (class "crashed") instead of looping. One row per thread, rewritten in place
-- (HOT updates: fillfactor leaves room), keeps this to one small write per batch.
CREATE TABLE :ONCELY_SCHEMA.attempts_in_flight (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  worker_id  bigint      NOT NULL,
  job_ids    bigint[]    NOT NULL DEFAULT '{}',
  started_at timestamptz
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
