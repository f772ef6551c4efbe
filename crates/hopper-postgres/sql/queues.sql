-- The queues holding jobs, paused or rate-limited, in name order, without reading the
-- jobs: the names in the indexes of waiting and finished jobs, skipped through one index
-- descent per queue (a loose index scan); the leased jobs, which only the index of jobs in
-- flight holds; the paused queues; and the limited ones.
WITH RECURSIVE waiting (queue) AS (
    SELECT (SELECT min(queue) FROM {schema}.hopper_jobs WHERE state = 0)
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.hopper_jobs WHERE state = 0 AND queue > w.queue)
    FROM waiting AS w
    WHERE w.queue IS NOT NULL
),
finished (queue) AS (
    SELECT (SELECT min(queue) FROM {schema}.hopper_jobs WHERE state >= 2)
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.hopper_jobs WHERE state >= 2 AND queue > f.queue)
    FROM finished AS f
    WHERE f.queue IS NOT NULL
)
SELECT queue FROM waiting WHERE queue IS NOT NULL
UNION
SELECT queue FROM finished WHERE queue IS NOT NULL
UNION
SELECT queue FROM {schema}.hopper_jobs WHERE state = 1
UNION
SELECT queue FROM {schema}.hopper_paused
UNION
SELECT queue FROM {schema}.hopper_rate_limits
ORDER BY queue
