SELECT id, host, pid, started_at, heartbeat_at, expires_at, queues
FROM hopper_workers
WHERE expires_at > ?1
