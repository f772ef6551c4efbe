-- Every settlement but acks, in one statement. `kind`: 1 retry, 2 dead letter, 3 release,
-- 4 cancel, 5 snooze. No assignment reads a column another one writes (multi-table
-- assignments have no defined order), except `errors` reading `attempt`, which only
-- releases and snoozes change, and they leave `errors` as it is.
--
-- A snooze is a release put off by `delay_ms`: due later, the attempt not charged, no error
-- recorded.
--
-- A retry or a dead letter appends `{attempt, at, error}` to the job's error history,
-- dropping the oldest past {error_history}; a history that is not a JSON array (another
-- program wrote it) starts over rather than failing the settlement.
UPDATE hopper_jobs AS t
JOIN ({rows}) AS s ON t.id = s.id AND t.lease_id = s.lease_id
SET t.state = CASE s.kind WHEN 2 THEN 3 WHEN 4 THEN 4 ELSE 0 END,
    t.run_at = IF(s.kind IN (1, 5), COALESCE(?, {now}) + s.delay_ms, t.run_at),
    t.attempt = IF(s.kind IN (3, 5), GREATEST(t.attempt - 1, 0), t.attempt),
    t.last_error = IF(s.kind IN (1, 2), s.error, t.last_error),
    t.errors = IF(s.kind IN (1, 2),
        JSON_ARRAY_APPEND(
            CASE WHEN JSON_VALID(t.errors) IS NOT TRUE THEN '[]'
                 WHEN JSON_TYPE(t.errors) <> 'ARRAY' THEN '[]'
                 WHEN JSON_LENGTH(t.errors) >= {error_history} THEN JSON_REMOVE(t.errors, '$[0]')
                 ELSE t.errors
            END,
            '$',
            JSON_OBJECT('attempt', t.attempt, 'at', COALESCE(?, {now}),
                        'error', COALESCE(s.kept_error, s.error))),
        t.errors),
    t.finished_at = IF(s.kind IN (2, 4), COALESCE(?, {now}), NULL),
    t.lease_id = NULL,
    t.lease_expires = NULL
WHERE t.state = 1
