-- Queue $1's counts (as counts.sql counts them), whether it is paused, the run_at of its
-- oldest due job and the time now. Each state is counted over the range of its own index
-- that holds the queue, never over the other queues' jobs. The oldest due job is the first
-- of some priority level's range of due jobs: one index descent per level (see
-- claim.sql), not a walk over every due job. Then the queue's throughput buckets (see
-- throughput.sql; $3 is the span of a bucket), as arrays, oldest first.
WITH RECURSIVE now AS (SELECT coalesce($2::bigint, {schema}.hopper_now_ms()) AS ms),
levels (priority) AS (
    SELECT (SELECT max(priority) FROM {schema}.hopper_jobs WHERE state = 0 AND queue = $1)
    UNION ALL
    SELECT (SELECT max(priority) FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = $1 AND priority < l.priority)
    FROM levels AS l
    WHERE l.priority IS NOT NULL
)
SELECT w.pending, w.scheduled,
       (SELECT count(*) FROM {schema}.hopper_jobs WHERE state = 1 AND queue = $1) AS leased,
       (SELECT count(*) FROM {schema}.hopper_jobs
        WHERE queue = $1 AND state = 3 AND state >= 2) AS dead,
       EXISTS (SELECT FROM {schema}.hopper_paused WHERE queue = $1) AS paused,
       (SELECT min(d.at)
        FROM levels AS l
        CROSS JOIN LATERAL (
            SELECT run_at AS at FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = $1 AND priority = l.priority
              AND run_at <= (SELECT ms FROM now)
            ORDER BY run_at
            LIMIT 1
        ) AS d
        WHERE l.priority IS NOT NULL) AS oldest_due,
       now.ms AS now,
       tp.at, tp.completed, tp.failed, tp.dead
FROM now, LATERAL (
    SELECT count(*) FILTER (WHERE run_at <= now.ms) AS pending,
           count(*) FILTER (WHERE run_at > now.ms) AS scheduled
    FROM {schema}.hopper_jobs
    WHERE state = 0 AND queue = $1
) AS w,
LATERAL (
    SELECT coalesce(array_agg(bucket ORDER BY bucket), '{}') AS at,
           coalesce(array_agg(completed ORDER BY bucket), '{}') AS completed,
           coalesce(array_agg(failed ORDER BY bucket), '{}') AS failed,
           coalesce(array_agg(dead ORDER BY bucket), '{}') AS dead
    FROM {schema}.hopper_throughput
    WHERE queue = $1
      AND bucket > now.ms - ((now.ms % $3::bigint) + $3::bigint) % $3::bigint - 3600000
) AS tp
