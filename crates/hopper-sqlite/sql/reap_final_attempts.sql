-- Dead-letters jobs whose lease expired on their last allowed attempt, with ?2 as their
-- last error and appended to their history (?3 the entries kept): see
-- settle_dead_letter.sql. Returns each one's queue and ordering key: a leased job with a
-- key is its key's head, and the next job of the key is unblocked (unblock_next.sql); and
-- each one's id and group, to count a member (src/groups.rs).
UPDATE hopper_jobs
SET state = 3, last_error = ?2, finished_at = ?1, lease_id = NULL, lease_expires = NULL,
    errors = json_remove(
        json_insert(
            coalesce(CASE WHEN json_valid(errors) THEN
                         CASE json_type(errors) WHEN 'array' THEN errors END END, '[]'),
            '$[#]', json_object('attempt', attempt, 'at', ?1, 'error', ?2)),
        '$[#-' || (?3 + 1) || ']')
WHERE state = 1 AND lease_expires <= ?1 AND attempt >= max_attempts
RETURNING queue, ordering_key, id, group_name
