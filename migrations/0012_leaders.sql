-- oncely schema, version 12: leases that elect one process per schema for a role, with no
-- session state. The metrics' database gauges were exported by the holder of a
-- session-level advisory lock, which a transaction-mode pooler (PgBouncer) cannot carry:
-- the lock stays on whichever server connection took it, and every process "holds" it.
-- A row per role instead: a process holds the role while worker_id is its own and
-- expires_at is in the future, renews it on each heartbeat with one statement, and
-- another takes it over once it has expired. Times are the database's (now()), never a
-- worker's clock.
CREATE TABLE :ONCELY_SCHEMA.leaders (
  role       text        PRIMARY KEY,
  worker_id  bigint      NOT NULL,
  expires_at timestamptz NOT NULL,
  CONSTRAINT leaders_role_not_empty CHECK (role <> '')
);
