-- The workers whose report has not expired, oldest first.
SELECT id, host, pid, started_at, heartbeat_at, expires_at, queues, schedules
FROM hopper_workers
WHERE expires_at > COALESCE(?, {now})
ORDER BY started_at, id
