-- What operators ask of the broker (hopper_core::admin): the error of every failed attempt,
-- queues paused for every worker, and jobs listed a page at a time.
--
-- `errors`: the errors of the latest failed attempts, oldest first, as a JSON array of
-- {"attempt": N, "at": ms, "error": "..."}, written by the statement that settles a retry
-- or a dead letter, and by the reaper on a final attempt. Nullable without a default, so
-- adding it rewrites no row.
ALTER TABLE {schema}.hopper_jobs ADD COLUMN errors jsonb;

-- Paused queues: claims take nothing from a queue listed here (claim.sql). Names compare
-- byte by byte, as the jobs table's do.
CREATE TABLE {schema}.hopper_paused (
    queue     text COLLATE "C" PRIMARY KEY,
    paused_at bigint NOT NULL
);

-- Finished jobs in the order they are listed, `id` breaking ties of `finished_at`: a page
-- starts right after its cursor by index range even among the hundreds that one statement
-- dead-letters at the same millisecond. A finished row without an end time (another
-- program wrote it) gets one, so that listings reach it.
UPDATE {schema}.hopper_jobs
SET finished_at = {schema}.hopper_now_ms()
WHERE state >= 2 AND finished_at IS NULL;
DROP INDEX {schema}.hopper_jobs_finished;
CREATE INDEX hopper_jobs_finished ON {schema}.hopper_jobs (queue, state, finished_at, id)
    WHERE state >= 2;
