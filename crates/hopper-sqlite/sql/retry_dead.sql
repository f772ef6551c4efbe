-- Puts the dead letters among ?1 (a JSON array of ids) back in their queue, due at ?2, as
-- new: no attempt charged, not finished. Their last error and history stay.
UPDATE hopper_jobs
SET state = 0, attempt = 0, run_at = ?2, finished_at = NULL, lease_id = NULL,
    lease_expires = NULL
WHERE state = 3 AND id IN (SELECT value FROM json_each(?1))
