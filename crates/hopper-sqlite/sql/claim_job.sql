UPDATE hopper_jobs
SET state = 1, lease_id = ?2, lease_expires = ?3, attempt = attempt + 1, started_at = ?4
WHERE id = ?1 AND state = 0
