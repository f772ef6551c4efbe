-- Puts the named dead letters with an ordering key back, due now and as if never attempted,
-- their `run_at` moved by the second value: `ordering::BLOCKED` for those that wait behind
-- an unfinished job of their key, else 0. Their errors stay.
UPDATE hopper_jobs
SET state = 0, attempt = 0, run_at = COALESCE(?, {now}) + ?, finished_at = NULL
WHERE state = 3 AND id IN ({ids})
