SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers::text, created_at,
       state, lease_id, last_error
FROM {schema}.hopper_jobs
WHERE id = $1
