-- settle_ack.sql for a job with an ordering key or a group (a member not counted yet),
-- returning its queue, key and group so that the key's next job can be unblocked
-- (unblock_next.sql) and the member counted (src/groups.rs).
DELETE FROM hopper_jobs
WHERE id = ?1 AND state = 1 AND lease_id = ?2
  AND (ordering_key IS NOT NULL OR group_name IS NOT NULL)
RETURNING queue, ordering_key, group_name
