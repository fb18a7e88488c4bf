-- oncely schema, version 11: functions only for the roles granted them, and no function
-- that can be fooled by its caller's search_path.
--
-- 1. A function is executable by PUBLIC unless revoked, so any role that can reach the
-- schema could call enqueue() and enqueue_unique(). EXECUTE now comes with the roles of
-- `oncely migrate --roles` (or a GRANT of the operator's choosing). Trigger functions need
-- no EXECUTE privilege to fire, so revoking theirs costs an INSERT nothing.
-- ALTER DEFAULT PRIVILEGES IN SCHEMA ... REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC does not do
-- this for later functions: PostgreSQL adds per-schema defaults to the global ones and cannot
-- take PUBLIC's global EXECUTE away per schema (the global form would change every function
-- the migrating role creates in any schema). `oncely migrate` therefore repeats this REVOKE
-- after every migration it applies.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA :ONCELY_SCHEMA FROM PUBLIC;

-- 2. enqueue_unique() runs as the schema's owner (SECURITY DEFINER): a unique enqueue with
-- on_conflict => 'replace' rewrites a pending job's payload, and a producer allowed to do it
-- this way need not be allowed to UPDATE jobs at all.
ALTER FUNCTION :ONCELY_SCHEMA.enqueue_unique(text, jsonb, text, text, timestamptz, integer, integer, text, text)
  SECURITY DEFINER;

-- 3. Every function pins its search_path: pg_catalog first, so that a caller's schema listed
-- ahead of it (SET search_path = mine, pg_catalog) cannot put its own now(), =, coalesce
-- argument casts or hashtext() in place of the built-ins; pg_temp last, so that a caller's
-- temporary table or function is never found at all. The functions name the schema's tables
-- in full and need nothing else on the path. For the SECURITY DEFINER ones (enqueue_unique()
-- and the check trigger of versions 6 and 7, pinned already) this is what keeps a caller from
-- running code as the owner; for the others it keeps a privileged caller (a worker, the owner
-- during a migration) from running code of a less privileged role that owns a schema on its path.
ALTER FUNCTION :ONCELY_SCHEMA.enqueue(text, jsonb, text, text, timestamptz, integer, integer, text, text)
  SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :ONCELY_SCHEMA.enqueue_unique(text, jsonb, text, text, timestamptz, integer, integer, text, text)
  SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :ONCELY_SCHEMA.notify_jobs_inserted() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :ONCELY_SCHEMA.notify_queue_pauses() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :ONCELY_SCHEMA.check_batch_completed() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION :ONCELY_SCHEMA.check_new_jobs() SET search_path = pg_catalog, pg_temp;
