SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at, lease_id,
       state, last_error, errors, finished_at, unique_key, ordering_key,
       started_at, rate_key
FROM hopper_jobs
WHERE state >= 2 AND state = 3 AND queue = ?1
ORDER BY finished_at, id
LIMIT ?2
