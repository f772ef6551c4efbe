-- The workers whose latest report has not expired at $1 (NULL: the database clock), oldest
-- first. `queues` and `schedules` come as text, for the broker to read (and to survive a
-- value another program wrote).
SELECT id, host, pid, started_at, heartbeat_at, expires_at, queues::text, schedules::text
FROM {schema}.hopper_workers
WHERE expires_at > coalesce($1::bigint, {schema}.hopper_now_ms())
ORDER BY started_at, id
