UPDATE hopper_jobs
SET state = 4, finished_at = ?3, lease_id = NULL, lease_expires = NULL
WHERE id = ?1 AND state = 1 AND lease_id = ?2
