-- The earliest run_at among one queue's pending jobs, due or delayed: one dive into
-- hopper_jobs_due, whatever their priorities. None for a paused queue, as its claim would
-- find (`claim.sql`), so that polling a paused queue stays one statement.
SELECT MIN(run_at) AS first_run_at
FROM hopper_jobs
WHERE state = 0 AND queue = ? AND NOT EXISTS (SELECT 1 FROM hopper_paused WHERE queue = ?)
