-- A page of waiting jobs of queue $1 in the order workers take them: priority (highest
-- first), then run_at, then id, strictly after the cursor ($4 priority, $5 run_at, $6 id;
-- a priority above any for the first page). Pending ($3) are the due ones, scheduled the
-- others. Columns as job_record.sql's, then lease_expires.
--
-- The order mixes directions, so no one row comparison bounds the index. The page is the
-- rest of the cursor's priority level, then the levels below it, each found by one index
-- descent as claim.sql finds them and read as a range of run_at: every part is an index
-- range of at most $7 entries, and levels are looked up only until the page is full.
WITH RECURSIVE now AS (SELECT coalesce($2::bigint, {schema}.hopper_now_ms()) AS ms),
due AS (
    SELECT CASE WHEN $3::bool THEN -9223372036854775808 ELSE ms + 1 END AS lo,
           CASE WHEN $3::bool THEN ms ELSE 9223372036854775807 END AS hi
    FROM now
),
levels (priority) AS (
    SELECT (SELECT max(priority) FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = $1 AND priority < $4::bigint)
    UNION ALL
    SELECT (SELECT max(priority) FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = $1 AND priority < l.priority)
    FROM levels AS l
    WHERE l.priority IS NOT NULL
)
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       state, lease_id, last_error, errors, started_at, finished_at, unique_key, ordering_key, lease_expires, rate_key
FROM (
    (SELECT id, queue, payload, priority, run_at, attempt, max_attempts,
            headers::text AS headers, created_at, state, lease_id, last_error,
            errors::text AS errors, started_at, finished_at, unique_key, ordering_key, lease_expires, rate_key
     FROM {schema}.hopper_jobs
     WHERE state = 0 AND queue = $1 AND priority = $4::bigint
       AND (run_at, id) > ($5::bigint, $6::bigint)
       AND run_at BETWEEN (SELECT lo FROM due) AND (SELECT hi FROM due)
     ORDER BY run_at, id
     LIMIT $7)
    UNION ALL
    -- No ORDER BY over the levels: they come highest first (see claim.sql).
    (SELECT j.*
     FROM levels AS l
     CROSS JOIN LATERAL (
         SELECT id, queue, payload, priority, run_at, attempt, max_attempts,
                headers::text AS headers, created_at, state, lease_id, last_error,
                errors::text AS errors, started_at, finished_at, unique_key, ordering_key, lease_expires, rate_key
         FROM {schema}.hopper_jobs
         WHERE state = 0 AND queue = $1 AND priority = l.priority
           AND run_at BETWEEN (SELECT lo FROM due) AND (SELECT hi FROM due)
         ORDER BY run_at, id
         LIMIT $7
     ) AS j
     WHERE l.priority IS NOT NULL
     LIMIT $7)
) AS page
ORDER BY priority DESC, run_at, id
LIMIT $7
