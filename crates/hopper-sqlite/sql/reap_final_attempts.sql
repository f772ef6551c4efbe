UPDATE hopper_jobs
SET state = 3, last_error = ?2, finished_at = ?1, lease_id = NULL, lease_expires = NULL
WHERE state = 1 AND lease_expires <= ?1 AND attempt >= max_attempts
