-- oncely schema, version 10: periodic jobs. One row per cron entry (by name), shared by
-- every worker that carries the entry: the statement that enqueues a slot's job advances
-- the row in the same statement, only forward, so one slot gets one job however many
-- workers race for it, and a worker killed before the statement commits leaves nothing.
CREATE TABLE :ONCELY_SCHEMA.cron_slots (
  name               text        PRIMARY KEY,
  -- The entry's schedule and time zone when the row last moved: a different one means the
  -- entry changed, and slots the new schedule "missed" before the change are not caught up.
  fingerprint        text        NOT NULL,
  -- Every slot up to here is decided (enqueued, or skipped by catch_up); a database time.
  covered_until      timestamptz NOT NULL,
  -- covered_until before the latest advance: the advancing statement returns it, so that
  -- it enqueues exactly the slots after what it replaced (RETURNING sees only the new row).
  prior_covered_until timestamptz,
  -- The newest slot a job was enqueued for (shown by `oncely cron list`).
  last_enqueued_slot timestamptz,
  updated_at         timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT cron_slots_name_not_empty CHECK (name <> '')
);
