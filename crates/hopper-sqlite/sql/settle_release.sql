UPDATE hopper_jobs
SET state = 0, attempt = MAX(attempt - 1, 0), lease_id = NULL, lease_expires = NULL
WHERE id = ?1 AND state = 1 AND lease_id = ?2
