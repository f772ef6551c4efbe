-- Limits queue $1 to $2 starts per $3 ms (0011_rate_limits.sql), per key when $5
-- (0014_rate_keys.sql); a limit for the queue forgets the keys' windows. A limit set
-- again or changed keeps the window's starts: they still count, so no change lets a burst
-- through.
-- Wakes the workers of every process, as an enqueue does, so that a raised limit is used
-- at once rather than at the time the old one gave.
WITH kept AS (
    INSERT INTO {schema}.hopper_rate_limits AS r (queue, max, per_ms, per_key)
    VALUES ($1, $2, $3, $5)
    ON CONFLICT (queue) DO UPDATE
    SET max = excluded.max, per_ms = excluded.per_ms, per_key = excluded.per_key
    RETURNING r.queue
),
keys_dropped AS (
    DELETE FROM {schema}.hopper_rate_keys AS k WHERE NOT $5 AND k.queue = $1
)
SELECT pg_notify($4, '') IS NOT NULL AS woke FROM kept
