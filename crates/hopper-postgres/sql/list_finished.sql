-- A page of finished jobs of queue $1 in state $2 (dead, completed or cancelled) in the
-- order they ended, strictly after the cursor ($3 finished_at, $4 id): one range of the
-- index of finished jobs. `state >= 2` lets a generic plan use that partial index.
-- Columns as list_waiting.sql's.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers::text, created_at,
       state, lease_id, last_error, errors::text, started_at, finished_at, unique_key, ordering_key,
       lease_expires, rate_key
FROM {schema}.hopper_jobs
WHERE queue = $1 AND state = $2::smallint AND state >= 2
  AND (finished_at, id) > ($3::bigint, $4::bigint)
ORDER BY finished_at, id
LIMIT $5
