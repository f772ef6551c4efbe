-- Dead-letters a job held under the named lease, with its error as the last and appended
-- to its history (?5 the error as kept there, ?6 the entries kept). The history is a JSON
-- array (migration 0004): the attempt that failed (`attempt` before this update), when,
-- and the error; once it holds more than ?6, the oldest goes. A column that is not a JSON
-- array (another program wrote it) starts again from this entry, so that it never fails
-- the settlement. A job with an ordering key or a group goes through
-- settle_dead_letter_ordered.sql, as for settle_ack.sql (see SETTLE_ACK in src/sql.rs).
UPDATE hopper_jobs
SET state = 3, last_error = ?3, finished_at = ?4, lease_id = NULL, lease_expires = NULL,
    errors = json_remove(
        json_insert(
            coalesce(CASE WHEN json_valid(errors) THEN
                         CASE json_type(errors) WHEN 'array' THEN errors END END, '[]'),
            '$[#]', json_object('attempt', attempt, 'at', ?4, 'error', ?5)),
        '$[#-' || (?6 + 1) || ']')
WHERE id = ?1 AND state = 1 AND lease_id = ?2 AND ordering_key IS NULL AND group_name IS NULL
