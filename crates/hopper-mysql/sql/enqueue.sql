INSERT INTO hopper_jobs
    (queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at)
VALUES {rows}
