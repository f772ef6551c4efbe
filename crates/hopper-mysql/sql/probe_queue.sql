-- The earliest run_at among one queue's pending jobs, due or delayed: one dive into
-- hopper_jobs_due, whatever their priorities.
SELECT MIN(run_at) AS first_run_at
FROM hopper_jobs
WHERE state = 0 AND queue = ?
