-- list_finished.sql newest first: latest end first, strictly before the cursor.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers::text, created_at,
       state, lease_id, last_error, errors::text, started_at, finished_at, unique_key, ordering_key,
       lease_expires, rate_key
FROM {schema}.hopper_jobs
WHERE queue = $1 AND state = $2::smallint AND state >= 2
  AND (finished_at, id) < ($3::bigint, $4::bigint)
ORDER BY finished_at DESC, id DESC
LIMIT $5
