-- Seals a group, whose row the caller locked, with its completion job.
UPDATE hopper_groups
SET sealed = 1, completion_queue = ?, completion_payload = ?, completion_priority = ?,
    completion_run = ?, completion_run_ms = ?, completion_max_attempts = ?,
    completion_headers = ?, completion_ordering_key = ?
WHERE name = ?
