-- Rows go in in input order, so identity ids ascend in input order too: sorting the
-- returned ids gives them back in the order the caller passed the jobs.
WITH now AS (SELECT coalesce($8::bigint, {schema}.hopper_now_ms()) AS ms),
ins AS (
    INSERT INTO {schema}.hopper_jobs
        (queue, payload, priority, run_at, max_attempts, headers, created_at)
    SELECT u.queue, u.payload, u.priority,
           coalesce(u.run_at, now.ms + u.delay_ms), u.max_attempts, u.headers::jsonb, now.ms
    FROM unnest($1::text[], $2::bytea[], $3::int[], $4::bigint[], $5::bigint[], $6::int[], $7::text[])
             WITH ORDINALITY AS u(queue, payload, priority, run_at, delay_ms, max_attempts, headers, ord),
         now
    ORDER BY u.ord
    RETURNING id
)
SELECT ins.id FROM ins, (SELECT pg_notify($9, '')) AS wake ORDER BY ins.id
