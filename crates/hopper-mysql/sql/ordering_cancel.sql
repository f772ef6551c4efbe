-- Cancels a pending job with an ordering key, locked by `job_lock.sql`.
UPDATE hopper_jobs SET state = 4, finished_at = COALESCE(?, {now}) WHERE id = ? AND state = 0
