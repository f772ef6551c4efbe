-- Dead-letters a locked candidate that cannot be read as a job (a column another program
-- wrote out of range), with the reason, so that it stops coming back to every claim.
UPDATE hopper_jobs
SET state = 3, last_error = ?, finished_at = COALESCE(?, {now}), lease_id = NULL,
    lease_expires = NULL
WHERE id = ? AND state = 0
