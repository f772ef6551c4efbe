WITH now AS (SELECT coalesce($3::bigint, {schema}.hopper_now_ms()) AS ms),
picked AS MATERIALIZED (
    SELECT j.id
    FROM unnest($1::text[], $2::int[]) AS b(queue, n)
    CROSS JOIN LATERAL (
        SELECT id FROM {schema}.hopper_jobs
        WHERE state = 0 AND queue = b.queue AND run_at <= (SELECT ms FROM now)
        ORDER BY priority DESC, run_at, id
        LIMIT b.n
        FOR UPDATE SKIP LOCKED
    ) AS j
)
UPDATE {schema}.hopper_jobs AS t
SET state = 1,
    lease_id = $4,
    lease_expires = now.ms + $5,
    started_at = now.ms,
    attempt = t.attempt + 1
FROM picked, now
WHERE t.id = picked.id
RETURNING t.id, t.queue, t.payload, t.priority, t.run_at, t.attempt, t.max_attempts,
          t.headers::text, t.created_at
