-- A page of a queue's leased jobs, soonest expiry first: at most ?4 after (?2, ?3) in
-- (lease_expires, id), in two ranges of the expiry index as in list_waiting.sql. That
-- index holds the leased jobs of every queue (one by queue would cost every claim and
-- settlement a write): each is read to keep those of ?1. The last column is the cursor's
-- key.
SELECT j.id, j.queue, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts, j.headers,
       j.created_at, j.lease_id, j.state, j.last_error, j.errors, j.finished_at, j.unique_key,
       j.ordering_key, j.started_at,
       j.lease_expires, j.rate_key
FROM (
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_lease_expiry
        WHERE state = 1 AND lease_expires = ?2 AND id > ?3 AND queue = ?1
        ORDER BY id
        LIMIT ?4
    )
    UNION ALL
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_lease_expiry
        WHERE state = 1 AND lease_expires > ?2 AND queue = ?1
        ORDER BY lease_expires, id
        LIMIT ?4
    )
    LIMIT ?4
) AS page
JOIN hopper_jobs AS j ON j.id = page.id
