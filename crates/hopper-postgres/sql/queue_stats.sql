-- Queue $1's counts (as counts.sql counts them), whether it is paused, the run_at of its
-- oldest due job and the time now. Each state is counted over the range of its own index
-- that holds the queue, never over the other queues' jobs; given $4, no further than $4
-- jobs (NULL: every job, `LIMIT NULL` being no limit), so that a glance at a queue of a
-- million jobs reads $4 index entries per state, not the million.
-- Bounded, the waiting jobs are counted per priority level: a level's due jobs are one
-- range of the index and its delayed jobs the next, so neither count walks the other's
-- jobs. Exact, both are counted in one walk of the queue's range (`waiting`, read only
-- then), twice as fast as the levels' ranges one by one. The levels take one index
-- descent each (see claim.sql); the oldest due job is the first of some level's range of
-- due jobs. Then the queue's throughput buckets (see throughput.sql; $3 is the span of a
-- bucket), as arrays, oldest first, and its rate limit where it has one (starts per
-- window, and the window in ms: 0011_rate_limits.sql).
WITH RECURSIVE now AS (SELECT coalesce($2::bigint, {schema}.hopper_now_ms()) AS ms),
levels (priority) AS (
    SELECT (SELECT max(priority) FROM {schema}.hopper_jobs WHERE state = 0 AND queue = $1)
    UNION ALL
    SELECT (SELECT max(priority) FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = $1 AND priority < l.priority)
    FROM levels AS l
    WHERE l.priority IS NOT NULL
),
waiting AS (
    SELECT count(*) FILTER (WHERE run_at <= (SELECT ms FROM now)) AS pending,
           count(*) FILTER (WHERE run_at > (SELECT ms FROM now)) AS scheduled
    FROM {schema}.hopper_jobs
    WHERE state = 0 AND queue = $1
)
SELECT CASE WHEN $4::bigint IS NULL THEN (SELECT pending FROM waiting) ELSE (
           SELECT count(*) FROM (
               SELECT 1 FROM levels AS l
               CROSS JOIN LATERAL (
                   SELECT 1 FROM {schema}.hopper_jobs
                   WHERE state = 0 AND queue = $1 AND priority = l.priority
                     AND run_at <= now.ms
                   LIMIT $4::bigint
               ) AS j
               WHERE l.priority IS NOT NULL
               LIMIT $4::bigint
           ) AS x) END AS pending,
       CASE WHEN $4::bigint IS NULL THEN (SELECT scheduled FROM waiting) ELSE (
           SELECT count(*) FROM (
               SELECT 1 FROM levels AS l
               CROSS JOIN LATERAL (
                   SELECT 1 FROM {schema}.hopper_jobs
                   WHERE state = 0 AND queue = $1 AND priority = l.priority
                     AND run_at > now.ms
                   LIMIT $4::bigint
               ) AS j
               WHERE l.priority IS NOT NULL
               LIMIT $4::bigint
           ) AS x) END AS scheduled,
       (SELECT count(*) FROM (
            SELECT 1 FROM {schema}.hopper_jobs WHERE state = 1 AND queue = $1
            LIMIT $4::bigint
        ) AS x) AS leased,
       (SELECT count(*) FROM (
            SELECT 1 FROM {schema}.hopper_jobs WHERE queue = $1 AND state = 3 AND state >= 2
            LIMIT $4::bigint
        ) AS x) AS dead,
       EXISTS (SELECT FROM {schema}.hopper_paused WHERE queue = $1) AS paused,
       (SELECT min(d.at)
        FROM levels AS l
        CROSS JOIN LATERAL (
            SELECT run_at AS at FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = $1 AND priority = l.priority
              AND run_at <= now.ms
            ORDER BY run_at
            LIMIT 1
        ) AS d
        WHERE l.priority IS NOT NULL) AS oldest_due,
       now.ms AS now,
       tp.at, tp.completed, tp.failed, tp.dead,
       rl.max AS rate_max, rl.per_ms AS rate_per_ms, rl.per_key AS rate_per_key
FROM now
LEFT JOIN {schema}.hopper_rate_limits AS rl ON rl.queue = $1
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(bucket ORDER BY bucket), '{}') AS at,
           coalesce(array_agg(completed ORDER BY bucket), '{}') AS completed,
           coalesce(array_agg(failed ORDER BY bucket), '{}') AS failed,
           coalesce(array_agg(dead ORDER BY bucket), '{}') AS dead
    FROM {schema}.hopper_throughput
    WHERE queue = $1
      AND bucket > now.ms - ((now.ms % $3::bigint) + $3::bigint) % $3::bigint - 3600000
) AS tp
