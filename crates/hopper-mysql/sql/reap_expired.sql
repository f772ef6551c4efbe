-- The jobs whose lease expired, locked, each saying whether it was on its last attempt, and
-- its ordering key and group: `reap.sql` returns them, the keys of those that die move
-- on, and their groups count them.
SELECT id, CAST(attempt >= max_attempts AS SIGNED), queue, ordering_key, group_name
FROM hopper_jobs
WHERE state = 1 AND lease_expires <= COALESCE(?, {now})
FOR UPDATE
