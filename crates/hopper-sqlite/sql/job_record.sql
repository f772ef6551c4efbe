SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at, lease_id,
       state, last_error, errors, finished_at, unique_key, ordering_key,
       started_at, rate_key
FROM hopper_jobs
WHERE id = ?1
