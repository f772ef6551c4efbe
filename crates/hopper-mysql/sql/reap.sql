-- Jobs whose lease expired go back to pending, or to dead on their last attempt.
UPDATE hopper_jobs
SET last_error = IF(attempt >= max_attempts, 'lease expired on the final attempt', last_error),
    finished_at = IF(attempt >= max_attempts, COALESCE(?, {now}), NULL),
    state = IF(attempt >= max_attempts, 3, 0),
    lease_id = NULL,
    lease_expires = NULL
WHERE state = 1 AND lease_expires <= COALESCE(?, {now})
