-- The ranges Hopper gives every job, enforced by the table itself, so that a row written by
-- another program cannot hold what a worker could not read: `state` 0 to 4, attempts from 0
-- with at least one allowed, run times from the year 1 to the end of 9999 (the limits of
-- `hopper_core::job`; priority and attempts are already 32-bit columns).
--
-- A row already out of range becomes a dead letter naming the column and its value, with
-- the value brought into range, so that it can be listed, retried or discarded.
UPDATE {schema}.hopper_jobs
SET state = 3,
    lease_id = NULL,
    lease_expires = NULL,
    finished_at = {schema}.hopper_now_ms(),
    last_error = 'the row cannot be read as a job: column ' || why || ' out of range',
    run_at = greatest(-62135596800000, least(253402300799999, run_at)),
    attempt = greatest(0, attempt),
    max_attempts = greatest(1, max_attempts)
FROM (
    SELECT id AS bad_id,
           CASE WHEN state NOT BETWEEN 0 AND 4 THEN 'state: ' || state
                WHEN run_at NOT BETWEEN -62135596800000 AND 253402300799999
                    THEN 'run_at: ' || run_at
                WHEN attempt < 0 THEN 'attempt: ' || attempt
                WHEN max_attempts < 1 THEN 'max_attempts: ' || max_attempts
           END AS why
    FROM {schema}.hopper_jobs
) AS bad
WHERE id = bad_id AND why IS NOT NULL;

ALTER TABLE {schema}.hopper_jobs
    ADD CONSTRAINT hopper_jobs_state CHECK (state BETWEEN 0 AND 4),
    ADD CONSTRAINT hopper_jobs_run_at
        CHECK (run_at BETWEEN -62135596800000 AND 253402300799999),
    ADD CONSTRAINT hopper_jobs_attempt CHECK (attempt >= 0),
    ADD CONSTRAINT hopper_jobs_max_attempts CHECK (max_attempts >= 1);
