-- Every queue with jobs, paused or rate-limited, each at least once, in no order. Waiting
-- and finished jobs are found by a skip scan of the indexes that lead with `queue`, one
-- descent per queue rather than a walk over its jobs; leased jobs (a worker's window each)
-- by their expiry index.
WITH RECURSIVE
    waiting(queue) AS (
        SELECT (SELECT min(queue) FROM hopper_jobs WHERE state = 0)
        UNION ALL
        SELECT (SELECT min(queue) FROM hopper_jobs WHERE state = 0 AND queue > waiting.queue)
        FROM waiting
        WHERE queue IS NOT NULL
    ),
    finished(queue) AS (
        SELECT (SELECT min(queue) FROM hopper_jobs WHERE state >= 2)
        UNION ALL
        SELECT (SELECT min(queue) FROM hopper_jobs WHERE state >= 2 AND queue > finished.queue)
        FROM finished
        WHERE queue IS NOT NULL
    )
SELECT queue FROM waiting WHERE queue IS NOT NULL
UNION ALL
SELECT queue FROM finished WHERE queue IS NOT NULL
UNION ALL
SELECT queue FROM hopper_jobs INDEXED BY hopper_jobs_lease_expiry WHERE state = 1
UNION ALL
SELECT queue FROM hopper_paused
UNION ALL
SELECT queue FROM hopper_rate_limits
