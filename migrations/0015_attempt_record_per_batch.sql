-- oncely schema, version 15: an attempt record is a row per batch, found by its jobs' ids
-- through an index, instead of one row per worker thread rewritten in place.
--
-- While a transaction somewhere holds back the xmin horizon (a long report, an idle
-- transaction holding an xid), no version of a row updated since can be removed, pruned or
-- skipped. A thread's one row, rewritten twice per batch, grew a chain of tens of thousands
-- of versions under its one primary-key value, and every start of a record read the whole
-- table (the lookup of other records naming its jobs had no index): after 90 s of a held
-- xid the start took 4.6 ms, after 240 s 15 ms, and a worker served 59 % of its clean rate.
--
-- Now each batch inserts a row of its own (a fresh id: one heap version under it, however
-- long the horizon is held) and its COMMIT deletes it. The lookup goes through a GiST index
-- on the span of the row's job ids (one entry per batch, not one per job id as a GIN index
-- on the array would take): it visits only the records whose span overlaps the new batch's.
-- The worker writes the span with the row. A record of a version-14 worker still running
-- while this migration applies has none (NULL): the lookup reads those too, through the
-- same index (GiST indexes NULLs), so that their crashed attempts still count.
ALTER TABLE :ONCELY_SCHEMA.attempts_in_flight ADD COLUMN job_span int8range;
UPDATE :ONCELY_SCHEMA.attempts_in_flight
   SET job_span = (SELECT int8range(min(x), max(x), '[]') FROM unnest(job_ids) AS x);
CREATE INDEX attempts_in_flight_job_span_idx ON :ONCELY_SCHEMA.attempts_in_flight USING gist (job_span);
-- Rows are inserted and deleted now, not updated in place: the room fillfactor left for HOT
-- updates would only be empty.
ALTER TABLE :ONCELY_SCHEMA.attempts_in_flight SET (fillfactor = 100);

-- job_stats rows were keyed by the thread's record row; a thread now draws its slot id here.
CREATE SEQUENCE :ONCELY_SCHEMA.attempt_slots;
