-- Lists a worker until its report expires: a new row, or the latest report of a listed
-- worker replacing the last. One clock reading serves both times (`NOW(3)` is fixed for
-- the statement), so `expires_at` is `heartbeat_at` plus the report's ttl exactly. Its
-- queues and schedules are JSON arrays, replaced whole with each report.
INSERT INTO hopper_workers (id, host, pid, started_at, heartbeat_at, expires_at, queues,
                            schedules)
VALUES (?, ?, ?, ?, COALESCE(?, {now}), COALESCE(?, {now}) + ?, ?, ?)
ON DUPLICATE KEY UPDATE
    host = VALUES(host),
    pid = VALUES(pid),
    started_at = VALUES(started_at),
    heartbeat_at = VALUES(heartbeat_at),
    expires_at = VALUES(expires_at),
    queues = VALUES(queues),
    schedules = VALUES(schedules)
