-- One priority level's due jobs of a queue, in fetch order: a range of the ready index, so
-- jobs delayed into the future are never walked over. INDEXED BY: without statistics the
-- planner may prefer another index and sort every due job.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at, lease_id
FROM hopper_jobs INDEXED BY hopper_jobs_ready
WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at <= ?3
ORDER BY run_at, id
LIMIT CASE WHEN EXISTS (SELECT 1 FROM hopper_paused WHERE queue = ?1) THEN 0 ELSE ?4 END
