UPDATE hopper_jobs
SET lease_expires = COALESCE(?, {now}) + ?
WHERE state = 1 AND lease_id IN ({ids}) AND lease_expires > COALESCE(?, {now})
