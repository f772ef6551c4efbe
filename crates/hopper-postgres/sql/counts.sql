SELECT count(*) FILTER (WHERE state = 0 AND run_at <= now.ms),
       count(*) FILTER (WHERE state = 0 AND run_at > now.ms),
       count(*) FILTER (WHERE state = 1),
       count(*) FILTER (WHERE state = 3)
FROM {schema}.hopper_jobs, (SELECT coalesce($2::bigint, {schema}.hopper_now_ms()) AS ms) AS now
WHERE queue = $1 AND state IN (0, 1, 3)
