INSERT INTO hopper_jobs (queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at)
VALUES (?1, 0, ?2, ?3, 0, ?4, ?5, ?6, ?7)
