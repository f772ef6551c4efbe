-- Every queue holding a job in any state, paused, or rate-limited, in name order. The
-- distinct names of the index that leads with the queue are read by a loose index scan, one
-- dive per queue, whatever the number of jobs.
SELECT queue FROM (SELECT DISTINCT queue FROM hopper_jobs FORCE INDEX (hopper_jobs_finished))
    AS with_jobs
UNION
SELECT queue FROM hopper_paused
UNION
SELECT queue FROM hopper_rate_limits
ORDER BY queue
