-- Puts off a job held under the named lease until ?3: pending again, the attempt this
-- lease charged given back (as settle_release.sql does), and no error recorded.
UPDATE hopper_jobs
SET state = 0, run_at = ?3, attempt = MAX(attempt - 1, 0), lease_id = NULL, lease_expires = NULL
WHERE id = ?1 AND state = 1 AND lease_id = ?2
