SELECT (SELECT priority
        FROM hopper_jobs INDEXED BY hopper_jobs_ready
        WHERE state = 0 AND queue = ?1
        ORDER BY priority DESC
        LIMIT 1),
       max(r.max), r.per_ms, r.starts, r.per_key, r.swept_at
FROM hopper_rate_limits AS r
WHERE r.queue = ?1
