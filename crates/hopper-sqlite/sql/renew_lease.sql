UPDATE hopper_jobs
SET lease_expires = ?2
WHERE state = 1 AND lease_id = ?1 AND lease_expires > ?3
