-- The lowest priority level among a queue's pending jobs above a bound: one index dive.
SELECT priority
FROM hopper_jobs FORCE INDEX (hopper_jobs_ready)
WHERE state = 0 AND queue = ? AND priority > ?
ORDER BY priority
LIMIT 1
