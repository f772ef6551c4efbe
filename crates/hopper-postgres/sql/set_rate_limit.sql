-- Limits queue $1 to $2 starts per $3 ms (0011_rate_limits.sql). A limit set again or
-- changed keeps the window's starts: they still count, so no change lets a burst through.
-- Wakes the workers of every process, as an enqueue does, so that a raised limit is used
-- at once rather than at the time the old one gave.
WITH kept AS (
    INSERT INTO {schema}.hopper_rate_limits AS r (queue, max, per_ms)
    VALUES ($1, $2, $3)
    ON CONFLICT (queue) DO UPDATE SET max = excluded.max, per_ms = excluded.per_ms
    RETURNING r.queue
)
SELECT pg_notify($4, '') IS NOT NULL AS woke FROM kept
