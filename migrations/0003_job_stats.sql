-- oncely schema, version 3: outcome counts for `oncely stats` and `oncely check`.

-- Per worker thread (its attempt-record row) and minute: what the batches it committed in
-- that minute did. Written inside each batch's own transaction, so the counts are exact
-- (a rolled-back batch counts nothing) and no two threads ever update the same row: there
-- is no hot row to serialise workers. Counters change, keys do not: updates are HOT.
CREATE TABLE :ONCELY_SCHEMA.job_stats (
  slot_id       bigint      NOT NULL,
  minute        timestamptz NOT NULL,
  queue         text        NOT NULL,
  completed     bigint      NOT NULL DEFAULT 0,
  deduplicated  bigint      NOT NULL DEFAULT 0,
  retried       bigint      NOT NULL DEFAULT 0,  -- failed attempts that will run again
  dead_lettered bigint      NOT NULL DEFAULT 0,
  crashed       bigint      NOT NULL DEFAULT 0,  -- attempts found unfinished (their worker died)
  run_time_us   bigint      NOT NULL DEFAULT 0,  -- handler time of completed jobs
  PRIMARY KEY (slot_id, minute, queue)
) WITH (fillfactor = 70);
CREATE INDEX job_stats_minute_idx ON :ONCELY_SCHEMA.job_stats (minute);
