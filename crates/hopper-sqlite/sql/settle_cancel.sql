-- Cancels a job held under the named lease, if it has no ordering key and no group; one
-- with either goes through settle_cancel_ordered.sql, as for settle_ack.sql (see
-- SETTLE_ACK in src/sql.rs).
UPDATE hopper_jobs
SET state = 4, finished_at = ?3, lease_id = NULL, lease_expires = NULL
WHERE id = ?1 AND state = 1 AND lease_id = ?2 AND ordering_key IS NULL AND group_name IS NULL
