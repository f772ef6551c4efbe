-- list_waiting.sql reversed: at most ?6 before (?3, ?4), with run_at after ?5, latest
-- first.
SELECT j.id, j.queue, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts, j.headers,
       j.created_at, j.lease_id, j.state, j.last_error, j.errors, j.finished_at, j.unique_key,
       j.ordering_key, j.started_at,
       j.priority, j.rate_key
FROM (
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_ready
        WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at = ?3 AND id < ?4
          AND run_at > ?5
        ORDER BY id DESC
        LIMIT ?6
    )
    UNION ALL
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_ready
        WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at < ?3 AND run_at > ?5
        ORDER BY run_at DESC, id DESC
        LIMIT ?6
    )
    LIMIT ?6
) AS page
JOIN hopper_jobs AS j ON j.id = page.id
