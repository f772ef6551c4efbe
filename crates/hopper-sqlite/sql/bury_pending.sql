-- Dead-letters a pending row that cannot be read as a job (a column another program wrote
-- out of range), with the reason, so that it stops coming back to every claim. Returns its
-- queue and ordering key: a claim candidate is not blocked, so one with a key was its
-- key's head, and the next job of the key is unblocked (unblock_next.sql). And its group,
-- to count a member as dead (src/groups.rs).
UPDATE hopper_jobs
SET state = 3, last_error = ?2, finished_at = ?3, lease_id = NULL, lease_expires = NULL
WHERE id = ?1 AND state = 0
RETURNING queue, ordering_key, group_name
