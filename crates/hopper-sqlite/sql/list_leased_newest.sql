-- list_leased.sql reversed: at most ?4 before (?2, ?3), latest expiry first.
SELECT j.id, j.queue, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts, j.headers,
       j.created_at, j.lease_id, j.state, j.last_error, j.errors, j.finished_at, j.unique_key,
       j.ordering_key, j.started_at,
       j.lease_expires, j.rate_key
FROM (
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_lease_expiry
        WHERE state = 1 AND lease_expires = ?2 AND id < ?3 AND queue = ?1
        ORDER BY id DESC
        LIMIT ?4
    )
    UNION ALL
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_lease_expiry
        WHERE state = 1 AND lease_expires < ?2 AND queue = ?1
        ORDER BY lease_expires DESC, id DESC
        LIMIT ?4
    )
    LIMIT ?4
) AS page
JOIN hopper_jobs AS j ON j.id = page.id
