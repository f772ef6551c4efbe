-- enqueue.sql with each job's rate key ($10; NULL for a job without), for batches in
-- which some job has one (and none a unique or an ordering key or a group): the key is
-- stored in the insert itself, so no claim sees the job without it.
WITH now AS (SELECT coalesce($8::bigint, {schema}.hopper_now_ms()) AS ms),
ins AS (
    INSERT INTO {schema}.hopper_jobs
        (queue, payload, priority, run_at, max_attempts, headers, created_at, rate_key)
    SELECT u.queue, u.payload, u.priority,
           coalesce(u.run_at, now.ms + u.delay_ms), u.max_attempts, u.headers::jsonb, now.ms,
           u.rate_key
    FROM unnest($1::text[], $2::bytea[], $3::int[], $4::bigint[], $5::bigint[], $6::int[], $7::text[],
                 $10::text[])
             WITH ORDINALITY AS u(queue, payload, priority, run_at, delay_ms, max_attempts, headers,
                                  rate_key, ord),
         now
    ORDER BY u.ord
    RETURNING id
)
SELECT ins.id FROM ins, (SELECT pg_notify($9, '')) AS wake ORDER BY ins.id
