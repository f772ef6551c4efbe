UPDATE hopper_jobs
SET state = 3, last_error = ?3, finished_at = ?4, lease_id = NULL, lease_expires = NULL
WHERE id = ?1 AND state = 1 AND lease_id = ?2
