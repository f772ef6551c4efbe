-- list_finished.sql reversed: at most ?5 before (?3, ?4), the latest to finish first.
SELECT j.id, j.queue, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts, j.headers,
       j.created_at, j.lease_id, j.state, j.last_error, j.errors, j.finished_at, j.unique_key,
       j.ordering_key, j.started_at,
       j.finished_at, j.rate_key
FROM (
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_finished
        WHERE state >= 2 AND queue = ?1 AND state = ?2 AND finished_at = ?3 AND id < ?4
        ORDER BY id DESC
        LIMIT ?5
    )
    UNION ALL
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_finished
        WHERE state >= 2 AND queue = ?1 AND state = ?2 AND finished_at < ?3
        ORDER BY finished_at DESC, id DESC
        LIMIT ?5
    )
    LIMIT ?5
) AS page
JOIN hopper_jobs AS j ON j.id = page.id
