-- A group's counts and completion job, to enqueue it.
SELECT members, succeeded, dead, cancelled, completion_queue, completion_payload,
       completion_priority, completion_run, completion_run_ms, completion_max_attempts,
       completion_headers, completion_ordering_key
FROM hopper_groups WHERE name = ?
