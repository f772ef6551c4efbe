-- insert_job.sql for a job with a unique key: the same row, with the key (?8) kept in it
-- for the job's record. Jobs without one go through insert_job.sql and leave it NULL.
INSERT INTO hopper_jobs (queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at, unique_key)
VALUES (?1, 0, ?2, ?3, 0, ?4, ?5, ?6, ?7, ?8)
