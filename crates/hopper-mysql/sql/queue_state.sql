-- What a queue's statistics add to its counts: whether it is paused, the run_at of its
-- oldest due job (one dive into hopper_jobs_due), the clock that was read against, and its
-- rate limit (NULL for none: a primary-key read each) and whether it holds per key.
SELECT CAST(EXISTS (SELECT 1 FROM hopper_paused WHERE queue = ?) AS SIGNED) AS paused,
       (SELECT MIN(run_at) FROM hopper_jobs
        WHERE state = 0 AND queue = ? AND run_at <= COALESCE(?, {now})) AS oldest_due,
       CAST(COALESCE(?, {now}) AS SIGNED) AS now_ms,
       (SELECT CAST(`max` AS SIGNED) FROM hopper_rate_limits WHERE queue = ?) AS rate_max,
       (SELECT per_ms FROM hopper_rate_limits WHERE queue = ?) AS rate_per_ms,
       CAST(EXISTS (SELECT 1 FROM hopper_rate_per_key WHERE queue = ?) AS SIGNED) AS rate_per_key
