-- One page of a queue's leased jobs after a cursor, by lease expiry, in the listing's
-- direction. The expiry index holds the leases of every queue, no more jobs than workers
-- hold at once, and is walked in order until the page fills.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       state, lease_id, last_error, finished_at, errors, lease_expires, unique_key,
       ordering_key, started_at, rate_key
FROM hopper_jobs FORCE INDEX (hopper_jobs_lease_expires)
WHERE state = 1 AND queue = ?
  AND (lease_expires {after} ? OR (lease_expires = ? AND id {after} ?))
ORDER BY lease_expires {order}, id {order}
LIMIT ?
