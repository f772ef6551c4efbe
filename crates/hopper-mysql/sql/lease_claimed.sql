UPDATE hopper_jobs
SET state = 1, lease_id = ?, lease_expires = COALESCE(?, {now}) + ?, attempt = attempt + 1
WHERE id IN ({ids})
