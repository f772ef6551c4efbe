-- Puts the named dead letters back, due now, as if never attempted; their errors stay.
UPDATE hopper_jobs
SET state = 0, attempt = 0, run_at = COALESCE(?, {now}), finished_at = NULL
WHERE state = 3 AND id IN ({ids})
