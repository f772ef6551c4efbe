-- The earliest run_at among one queue's pending jobs, due or delayed: one dive into
-- hopper_jobs_due, whatever their priorities. Jobs waiting behind an earlier job of their
-- ordering key (`run_at` moved past every time a job can be given, `{max_run_at}`) are
-- left out: they are not due at any
-- time. None for a paused queue, as its claim would find (`claim.sql`), so that polling a
-- paused queue stays one statement.
SELECT MIN(run_at) AS first_run_at
FROM hopper_jobs
WHERE state = 0 AND queue = ? AND run_at <= {max_run_at}
  AND NOT EXISTS (SELECT 1 FROM hopper_paused WHERE queue = ?)
