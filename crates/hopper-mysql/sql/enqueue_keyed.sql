-- Adds the jobs of an enqueue in which some job has a unique or an ordering key:
-- `enqueue.sql` with each job's keys in its row (NULL for a key it does not have), `{rows}`
-- of `enqueue_keyed_row.sql`. The unique key stays in the row for the job's record, whether
-- or not the job keeps the hold; holds themselves are `hopper_unique`'s. Enqueues without
-- keys keep to `enqueue.sql`, which leaves both columns NULL. A member of a group has its
-- group in `group_name`, NULL for every other job; a job with a rate key has it in
-- `rate_key`.
INSERT INTO hopper_jobs
    (queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at,
     unique_key, ordering_key, group_name, rate_key)
VALUES {rows}
