SELECT id, host, pid, started_at, heartbeat_at, expires_at, queues, schedules
FROM hopper_workers
WHERE expires_at > ?1
