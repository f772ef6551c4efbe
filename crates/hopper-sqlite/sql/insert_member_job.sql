-- insert_job.sql for a member of a group (?8), kept in the row until the member is
-- counted. A member has no unique or ordering key (the core refuses one).
INSERT INTO hopper_jobs (queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at, group_name)
VALUES (?1, 0, ?2, ?3, 0, ?4, ?5, ?6, ?7, ?8)
