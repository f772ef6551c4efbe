-- A page of leased jobs of queue $1, soonest expiry first, strictly after the cursor
-- ($2 lease_expires, $3 id). Columns as list_waiting.sql's. Read by range of the index of
-- leased jobs, which is not by queue (an index by queue would cost every claim an insert):
-- other queues' jobs in flight are passed over.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers::text, created_at,
       state, lease_id, last_error, errors::text, started_at, finished_at, unique_key, ordering_key,
       lease_expires, rate_key
FROM {schema}.hopper_jobs
WHERE state = 1 AND queue = $1 AND (lease_expires, id) > ($2::bigint, $3::bigint)
ORDER BY lease_expires, id
LIMIT $4
