SELECT MIN(run_at) AS due
FROM hopper_jobs
WHERE state = 0 AND queue = ? AND run_at > COALESCE(?, {now})
