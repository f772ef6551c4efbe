-- FORCE INDEX: on `hopper_jobs_finished` (queue, finished_at) the server would walk the
-- queue's waiting jobs, all in its NULL section, before the first dead one. Listings by
-- cursor (`list_finished.sql`) take that index past the NULLs instead; here a dead job whose
-- end time another program left NULL still comes first, as it always did.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       state, lease_id, last_error, finished_at, errors, lease_expires, unique_key,
       ordering_key, started_at, rate_key
FROM hopper_jobs FORCE INDEX (hopper_jobs_due)
WHERE state = 3 AND queue = ?
ORDER BY finished_at, id
LIMIT ?
