-- Puts the dead letters among ?1 (a JSON array of ids) back in their queue, due at ?2, as
-- new: no attempt charged, not finished. Their last error and history stay. One with an
-- ordering key goes back blocked (?3, hopper_core::job::BLOCKED, added) and is returned
-- with its queue and key, so that the first job of each such key is unblocked once every
-- one is back, unless the key has a head (key_has_head.sql, then unblock_next.sql).
UPDATE hopper_jobs
SET state = 0, attempt = 0, finished_at = NULL, lease_id = NULL, lease_expires = NULL,
    run_at = ?2 + CASE WHEN ordering_key IS NULL THEN 0 ELSE ?3 END
WHERE state = 3 AND id IN (SELECT value FROM json_each(?1))
RETURNING queue, ordering_key
