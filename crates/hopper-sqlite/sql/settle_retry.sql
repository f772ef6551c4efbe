-- Returns a job held under the named lease to pending at a later run_at, with its error as
-- the last and appended to its history (?5 now, ?6 the error as kept there, ?7 the
-- entries kept): see settle_dead_letter.sql.
UPDATE hopper_jobs
SET state = 0, run_at = ?3, last_error = ?4, lease_id = NULL, lease_expires = NULL,
    errors = json_remove(
        json_insert(
            coalesce(CASE WHEN json_valid(errors) THEN
                         CASE json_type(errors) WHEN 'array' THEN errors END END, '[]'),
            '$[#]', json_object('attempt', attempt, 'at', ?5, 'error', ?6)),
        '$[#-' || (?7 + 1) || ']')
WHERE id = ?1 AND state = 1 AND lease_id = ?2
