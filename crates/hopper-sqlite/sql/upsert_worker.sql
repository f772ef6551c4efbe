-- A worker's report, replacing its previous one.
INSERT INTO hopper_workers (id, host, pid, started_at, heartbeat_at, expires_at, queues,
                            schedules)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at,
    queues = excluded.queues, schedules = excluded.schedules
