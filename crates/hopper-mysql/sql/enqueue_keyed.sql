-- Adds the jobs of an enqueue in which some job has a unique key: `enqueue.sql` with each
-- job's key in its row (NULL for a job of the batch without one), `{rows}` of
-- `enqueue_keyed_row.sql`. The key stays in the row for the job's record, whether or not
-- the job keeps the hold; holds themselves are `hopper_unique`'s. Enqueues without keys
-- keep to `enqueue.sql`, which leaves the column NULL.
INSERT INTO hopper_jobs
    (queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at,
     unique_key)
VALUES {rows}
