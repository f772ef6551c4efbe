SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       state, lease_id, last_error
FROM hopper_jobs
WHERE id = ?
