-- A worker's report (hopper_core::registry), in one statement: the worker's row written
-- anew, listed until now + ttl; what it settled added to each queue's running bucket;
-- workers whose reports expired and buckets past keeping deleted.
--
-- $1 id, $2 host, $3 pid, $4 started_at, $5 ttl (ms), $6 the queues as JSON, $7 now (NULL:
-- the database clock); $8 to $11 the queues that settled anything and their completed,
-- failed and dead counts; $12 the span of a bucket and $13 how long buckets are kept (ms);
-- $14 the schedules as JSON.
--
-- Reports of many workers run at once: buckets are written in queue order, and the deletes
-- skip rows another report holds, so two reports never wait on each other in a cycle. The
-- reporting worker's own row is left to the upsert, which the same statement's delete must
-- not also touch.
WITH now AS (
    SELECT ms, ms - ((ms % $12::bigint) + $12::bigint) % $12::bigint AS bucket
    FROM (SELECT coalesce($7::bigint, {schema}.hopper_now_ms()) AS ms) AS t
),
worker AS (
    INSERT INTO {schema}.hopper_workers AS w
        (id, host, pid, started_at, heartbeat_at, expires_at, queues, schedules)
    SELECT $1::text, $2::text, $3::bigint, $4::bigint, now.ms,
           now.ms + least($5::bigint, 9223372036854775807 - greatest(now.ms, 0)),
           $6::text::jsonb, $14::text::jsonb
    FROM now
    ON CONFLICT (id) DO UPDATE
    SET host = excluded.host,
        pid = excluded.pid,
        started_at = excluded.started_at,
        heartbeat_at = excluded.heartbeat_at,
        expires_at = excluded.expires_at,
        queues = excluded.queues,
        schedules = excluded.schedules
),
settled AS (
    INSERT INTO {schema}.hopper_throughput AS t (queue, bucket, completed, failed, dead)
    SELECT s.queue, now.bucket,
           sum(s.completed)::bigint, sum(s.failed)::bigint, sum(s.dead)::bigint
    FROM now, unnest($8::text[], $9::bigint[], $10::bigint[], $11::bigint[])
        AS s(queue, completed, failed, dead)
    GROUP BY s.queue, now.bucket
    ORDER BY s.queue
    ON CONFLICT (queue, bucket) DO UPDATE
    SET completed = t.completed + excluded.completed,
        failed = t.failed + excluded.failed,
        dead = t.dead + excluded.dead
),
expired AS (
    DELETE FROM {schema}.hopper_workers
    WHERE id IN (
        SELECT id FROM {schema}.hopper_workers
        WHERE expires_at <= (SELECT ms FROM now) AND id <> $1::text
        FOR UPDATE SKIP LOCKED
    )
),
aged AS (
    DELETE FROM {schema}.hopper_throughput
    WHERE (queue, bucket) IN (
        SELECT queue, bucket FROM {schema}.hopper_throughput
        WHERE bucket < (SELECT ms FROM now) - $13::bigint
        FOR UPDATE SKIP LOCKED
    )
)
SELECT 1
