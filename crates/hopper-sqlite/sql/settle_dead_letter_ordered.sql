-- settle_dead_letter.sql for a job with an ordering key or a group, returning its queue,
-- key and group (see settle_ack_ordered.sql).
UPDATE hopper_jobs
SET state = 3, last_error = ?3, finished_at = ?4, lease_id = NULL, lease_expires = NULL,
    errors = json_remove(
        json_insert(
            coalesce(CASE WHEN json_valid(errors) THEN
                         CASE json_type(errors) WHEN 'array' THEN errors END END, '[]'),
            '$[#]', json_object('attempt', attempt, 'at', ?4, 'error', ?5)),
        '$[#-' || (?6 + 1) || ']')
WHERE id = ?1 AND state = 1 AND lease_id = ?2
  AND (ordering_key IS NOT NULL OR group_name IS NOT NULL)
RETURNING queue, ordering_key, group_name
