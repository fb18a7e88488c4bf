-- oncely schema, version 13: a dead letter's error pattern, stored once instead of computed
-- per row by every grouping and pattern filter (the console's review, `oncely dlq list
-- --group-by error`, replay and purge --pattern).
--
-- The pattern is the last error with every run of digits folded to '#' ('(none)' without
-- an error): errors that differ only in ids, amounts or ports group together. A generated
-- column, so that every writer (the dead-letter move, a cancel, a row inserted by hand)
-- gets the same pattern without knowing the rule; src/store/dead_letters.hpp
-- (kErrorPatternSql) holds the same expression for the live jobs' grouping, and a test
-- checks that the two deparse alike.
--
-- Cost on an existing table: adding a stored column rewrites dead_letters under an ACCESS
-- EXCLUSIVE lock, and the index is then built under a SHARE lock (about 1 s per 100,000
-- dead letters on a 2-core VM, docs/operations.md). Meanwhile a job that dead-letters
-- waits (its claim transaction with it) and the dead-letter pages wait; nothing else does.
ALTER TABLE :ONCELY_SCHEMA.dead_letters
  ADD COLUMN error_pattern text NOT NULL
  GENERATED ALWAYS AS (coalesce(regexp_replace(last_error, '[0-9]+', '#', 'g'), '(none)')) STORED;

-- Serves the pattern filter (one group's list, its keyset pages, its count, its replay or
-- purge): hashtextextended(error_pattern, 0) = hashtextextended($p, 0) AND error_pattern = $p,
-- newest failure first. Not a btree on the text itself: a btree entry holds at most 2704
-- bytes, and an error longer than that (after compression) would make its dead-letter move
-- fail, which would leave the job retrying the move for ever. The 64-bit hash is what hash
-- partitioning uses (so it is stable across PostgreSQL versions and pg_upgrade); a
-- collision only costs a recheck of the text. The grouping itself reads the stored column
-- (no index serves a GROUP BY over every pattern better than the table scan).
CREATE INDEX dead_letters_error_pattern_idx
  ON :ONCELY_SCHEMA.dead_letters (hashtextextended(error_pattern, 0), failed_at, id);
