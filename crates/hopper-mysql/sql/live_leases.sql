SELECT DISTINCT lease_id
FROM hopper_jobs
WHERE state = 1 AND lease_id IN ({ids}) AND lease_expires > COALESCE(?, {now})
