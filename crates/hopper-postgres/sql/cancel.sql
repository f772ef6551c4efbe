-- Cancels a pending job; for a job with an ordering key, also its queue and key, whose
-- next job the broker then unblocks.
UPDATE {schema}.hopper_jobs
SET state = 4, finished_at = coalesce($2::bigint, {schema}.hopper_now_ms())
WHERE id = $1 AND state = 0
RETURNING id, CASE WHEN ordering_key IS NOT NULL THEN queue END, ordering_key
