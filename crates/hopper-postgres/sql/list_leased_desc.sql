-- list_leased.sql newest first: latest expiry first, strictly before the cursor.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers::text, created_at,
       state, lease_id, last_error, errors::text, started_at, finished_at, unique_key, ordering_key,
       lease_expires, rate_key
FROM {schema}.hopper_jobs
WHERE state = 1 AND queue = $1 AND (lease_expires, id) < ($2::bigint, $3::bigint)
ORDER BY lease_expires DESC, id DESC
LIMIT $4
