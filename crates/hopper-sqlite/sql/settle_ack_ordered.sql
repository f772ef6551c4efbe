-- settle_ack.sql for a job with an ordering key, returning its queue and key so that the
-- key's next job can be unblocked (unblock_next.sql).
DELETE FROM hopper_jobs WHERE id = ?1 AND state = 1 AND lease_id = ?2 AND ordering_key IS NOT NULL
RETURNING queue, ordering_key
