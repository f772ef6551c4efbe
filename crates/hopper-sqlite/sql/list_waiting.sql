-- A page of one priority level's waiting jobs of a queue in fetch order (run_at, then id):
-- at most ?6 after (?3, ?4), with run_at before ?5. Two ranges of the ready index, read in
-- turn so that the outer LIMIT keeps the first: the jobs sharing run_at ?3 with an id
-- above ?4, then those of a later run_at. One row comparison, `(run_at, id) > (?3, ?4)`,
-- bounds the index by run_at alone and walks every job sharing it (a batch enqueued in
-- one call): 57 ms past 900,000 jobs of one run_at, where this takes microseconds. The
-- last column is the cursor's key.
SELECT j.id, j.queue, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts, j.headers,
       j.created_at, j.lease_id, j.state, j.last_error, j.errors, j.finished_at, j.unique_key,
       j.ordering_key, j.started_at,
       j.priority, j.rate_key
FROM (
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_ready
        WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at = ?3 AND id > ?4
          AND run_at < ?5
        ORDER BY id
        LIMIT ?6
    )
    UNION ALL
    SELECT id FROM (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_ready
        WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at > ?3 AND run_at < ?5
        ORDER BY run_at, id
        LIMIT ?6
    )
    LIMIT ?6
) AS page
JOIN hopper_jobs AS j ON j.id = page.id
