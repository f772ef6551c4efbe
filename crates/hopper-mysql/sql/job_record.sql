SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       state, lease_id, last_error, finished_at, errors, lease_expires, unique_key,
       ordering_key, started_at, rate_key
FROM hopper_jobs
WHERE id = ?
