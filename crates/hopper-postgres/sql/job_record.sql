SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers::text, created_at,
       state, lease_id, last_error, errors::text, started_at, finished_at, unique_key, ordering_key,
       rate_key
FROM {schema}.hopper_jobs
WHERE id = $1
