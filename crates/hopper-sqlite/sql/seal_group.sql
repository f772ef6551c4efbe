-- Seals group ?1 with its completion job, making the group if it has no member yet. The
-- caller has checked that it was not sealed.
INSERT INTO hopper_groups (name, sealed, completion_queue, completion_payload,
                           completion_priority, completion_run, completion_run_ms,
                           completion_max_attempts, completion_headers, completion_ordering_key)
VALUES (?1, 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (name) DO UPDATE SET
    sealed = 1,
    completion_queue = excluded.completion_queue,
    completion_payload = excluded.completion_payload,
    completion_priority = excluded.completion_priority,
    completion_run = excluded.completion_run,
    completion_run_ms = excluded.completion_run_ms,
    completion_max_attempts = excluded.completion_max_attempts,
    completion_headers = excluded.completion_headers,
    completion_ordering_key = excluded.completion_ordering_key
