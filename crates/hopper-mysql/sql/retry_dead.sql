-- Puts the named dead letters without an ordering key back, due now, as if never attempted;
-- their errors stay. Those with a key go back under their key's lock (`ordering_redrive.sql`).
UPDATE hopper_jobs
SET state = 0, attempt = 0, run_at = COALESCE(?, {now}), finished_at = NULL
WHERE state = 3 AND id IN ({ids}) AND ordering_key IS NULL
