-- Cancels a pending job without an ordering key; one with a key is cancelled under the
-- lock of its row (`ordering_cancel.sql`), so that the next job of its key can run.
UPDATE hopper_jobs SET state = 4, finished_at = COALESCE(?, {now})
WHERE id = ? AND state = 0 AND ordering_key IS NULL
