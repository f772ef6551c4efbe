UPDATE hopper_jobs
SET state = 0, lease_id = NULL, lease_expires = NULL
WHERE state = 1 AND lease_expires <= ?1
