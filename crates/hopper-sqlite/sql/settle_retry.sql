UPDATE hopper_jobs
SET state = 0, run_at = ?3, last_error = ?4, lease_id = NULL, lease_expires = NULL
WHERE id = ?1 AND state = 1 AND lease_id = ?2
