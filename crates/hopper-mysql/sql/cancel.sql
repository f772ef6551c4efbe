UPDATE hopper_jobs SET state = 4, finished_at = COALESCE(?, {now}) WHERE id = ? AND state = 0
