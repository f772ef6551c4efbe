-- The earliest time a delayed job of a queue is due: jobs waiting behind an earlier job of
-- their ordering key (`run_at` moved past every time a job can be given, `{max_run_at}`,
-- by `ordering::BLOCKED`) have none. One range of
-- `hopper_jobs_due`, whose first entry is the answer.
SELECT MIN(run_at) AS due
FROM hopper_jobs
WHERE state = 0 AND queue = ? AND run_at > COALESCE(?, {now}) AND run_at <= {max_run_at}
