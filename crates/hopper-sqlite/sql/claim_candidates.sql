-- INDEXED BY: without statistics the planner may prefer the range on run_at in hopper_jobs_due
-- and sort every due job of the queue; hopper_jobs_ready yields fetch order and stops at LIMIT.
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at, lease_id
FROM hopper_jobs INDEXED BY hopper_jobs_ready
WHERE state = 0 AND queue = ?1 AND run_at <= ?2
ORDER BY priority DESC, run_at, id
LIMIT ?3
