-- The ranges Hopper gives every job, enforced by the table itself, so that a row written by
-- another program cannot hold what a worker could not read: `state` 0 to 4, attempts from 0
-- with at least one allowed, run times from the year 1 to the end of 9999 (the limits of
-- `hopper_core::job`; priority and attempts are already 32-bit columns). Enforced by
-- MySQL 8.0.16 and later and by MariaDB 10.2 and later.
--
-- A row already out of range becomes a dead letter naming the column and its value, with
-- the value brought into range, so that it can be listed, retried or discarded. Running
-- this again finds no such row; the constraints are added by one statement, and a second
-- run that finds them there counts the migration as applied.
UPDATE hopper_jobs
SET last_error = CONCAT('the row cannot be read as a job: column ',
        CASE WHEN state NOT BETWEEN 0 AND 4 THEN CONCAT('state: ', state)
             WHEN run_at NOT BETWEEN -62135596800000 AND 253402300799999
                 THEN CONCAT('run_at: ', run_at)
             WHEN attempt < 0 THEN CONCAT('attempt: ', attempt)
             ELSE CONCAT('max_attempts: ', max_attempts)
        END, ' out of range'),
    state = 3,
    lease_id = NULL,
    lease_expires = NULL,
    finished_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
    run_at = GREATEST(-62135596800000, LEAST(253402300799999, run_at)),
    attempt = GREATEST(0, attempt),
    max_attempts = GREATEST(1, max_attempts)
WHERE state NOT BETWEEN 0 AND 4
   OR run_at NOT BETWEEN -62135596800000 AND 253402300799999
   OR attempt < 0
   OR max_attempts < 1;

ALTER TABLE hopper_jobs
    ADD CONSTRAINT hopper_jobs_state CHECK (state BETWEEN 0 AND 4),
    ADD CONSTRAINT hopper_jobs_run_at
        CHECK (run_at BETWEEN -62135596800000 AND 253402300799999),
    ADD CONSTRAINT hopper_jobs_attempt CHECK (attempt >= 0),
    ADD CONSTRAINT hopper_jobs_max_attempts CHECK (max_attempts >= 1);
