-- The jobs whose lease expired, locked, each saying whether it was on its last attempt, and
-- its ordering key: `reap.sql` returns them, and the keys of those that die move on.
SELECT id, CAST(attempt >= max_attempts AS SIGNED), queue, ordering_key
FROM hopper_jobs
WHERE state = 1 AND lease_expires <= COALESCE(?, {now})
FOR UPDATE
