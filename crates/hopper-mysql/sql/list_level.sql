-- One page of a queue's waiting jobs of one priority level after a cursor: due ones
-- (`{due}` is `<=`) or scheduled ones (`>`), in the listing's direction (`{after}` and
-- `{order}`). One range of the ready index, which holds a level's due jobs before its
-- scheduled ones: a page across levels would walk, in each level, every job on the other
-- side of now (all the due jobs of a backlog, to list its few retries waiting out their
-- backoff), so levels are read one at a time, the next found by `level_below.sql` or
-- `level_above.sql`. A level's first page binds the cursor past every job.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       state, lease_id, last_error, finished_at, errors, lease_expires, unique_key,
       ordering_key, started_at, rate_key
FROM hopper_jobs FORCE INDEX (hopper_jobs_ready)
WHERE state = 0 AND queue = ? AND priority = ? AND run_at {due} COALESCE(?, {now})
  AND (run_at {after} ? OR (run_at = ? AND id {after} ?))
ORDER BY run_at {order}, id {order}
LIMIT ?
