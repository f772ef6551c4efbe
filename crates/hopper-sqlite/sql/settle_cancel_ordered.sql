-- settle_cancel.sql for a job with an ordering key or a group, returning its queue, key
-- and group (see settle_ack_ordered.sql).
UPDATE hopper_jobs
SET state = 4, finished_at = ?3, lease_id = NULL, lease_expires = NULL
WHERE id = ?1 AND state = 1 AND lease_id = ?2
  AND (ordering_key IS NOT NULL OR group_name IS NOT NULL)
RETURNING queue, ordering_key, group_name
