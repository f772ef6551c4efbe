-- Cancels a job if it is still pending, returning its queue, ordering key, stored run_at
-- and group: a job with a key that was not blocked was its key's head, and the next job
-- of the key is unblocked (unblock_next.sql); a member is counted (src/groups.rs).
UPDATE hopper_jobs SET state = 4, finished_at = ?2 WHERE id = ?1 AND state = 0
RETURNING queue, ordering_key, run_at, group_name
