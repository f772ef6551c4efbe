-- One page of a queue's jobs in a finished state (dead, completed, cancelled) after a
-- cursor, by the time they finished, in the listing's direction: one range of the index on
-- (queue, finished_at), past the NULLs of the queue's waiting and leased jobs. The state is
-- read from the row: the queue's dead and cancelled jobs share the range.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       state, lease_id, last_error, finished_at, errors, lease_expires, unique_key,
       ordering_key, started_at, rate_key
FROM hopper_jobs FORCE INDEX (hopper_jobs_finished)
WHERE queue = ? AND state = ?
  AND (finished_at {after} ? OR (finished_at = ? AND id {after} ?))
ORDER BY finished_at {order}, id {order}
LIMIT ?
