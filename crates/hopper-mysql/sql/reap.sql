-- The jobs `reap_expired.sql` locked go back to pending, or to dead on their last attempt,
-- with the error added to their history as `settle_update.sql` adds it.
UPDATE hopper_jobs
SET last_error = IF(attempt >= max_attempts, 'lease expired on the final attempt', last_error),
    errors = IF(attempt >= max_attempts,
        JSON_ARRAY_APPEND(
            CASE WHEN JSON_VALID(errors) IS NOT TRUE THEN '[]'
                 WHEN JSON_TYPE(errors) <> 'ARRAY' THEN '[]'
                 WHEN JSON_LENGTH(errors) >= {error_history} THEN JSON_REMOVE(errors, '$[0]')
                 ELSE errors
            END,
            '$',
            JSON_OBJECT('attempt', attempt, 'at', COALESCE(?, {now}),
                        'error', 'lease expired on the final attempt')),
        errors),
    finished_at = IF(attempt >= max_attempts, COALESCE(?, {now}), NULL),
    state = IF(attempt >= max_attempts, 3, 0),
    lease_id = NULL,
    lease_expires = NULL
WHERE state = 1 AND id IN ({ids})
