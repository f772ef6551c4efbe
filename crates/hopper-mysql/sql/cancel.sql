-- Cancels a pending job without an ordering key or a group; one with either is cancelled
-- under the lock of its row (`ordering_cancel.sql`), so that the next job of its key can
-- run and its group counts it.
UPDATE hopper_jobs SET state = 4, finished_at = COALESCE(?, {now})
WHERE id = ? AND state = 0 AND ordering_key IS NULL AND group_name IS NULL
