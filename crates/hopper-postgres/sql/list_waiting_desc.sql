-- list_waiting.sql newest first: the exact reverse order (priority lowest first, then
-- run_at and id latest first), strictly before the cursor ($4 priority, $5 run_at, $6 id;
-- a priority below any for the first page), the levels above it read backwards.
WITH RECURSIVE now AS (SELECT coalesce($2::bigint, {schema}.hopper_now_ms()) AS ms),
due AS (
    SELECT CASE WHEN $3::bool THEN -9223372036854775808 ELSE ms + 1 END AS lo,
           CASE WHEN $3::bool THEN ms ELSE 9223372036854775807 END AS hi
    FROM now
),
levels (priority) AS (
    SELECT (SELECT min(priority) FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = $1 AND priority > $4::bigint)
    UNION ALL
    SELECT (SELECT min(priority) FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = $1 AND priority > l.priority)
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
       AND (run_at, id) < ($5::bigint, $6::bigint)
       AND run_at BETWEEN (SELECT lo FROM due) AND (SELECT hi FROM due)
     ORDER BY run_at DESC, id DESC
     LIMIT $7)
    UNION ALL
    -- No ORDER BY over the levels: they come lowest first (see claim.sql).
    (SELECT j.*
     FROM levels AS l
     CROSS JOIN LATERAL (
         SELECT id, queue, payload, priority, run_at, attempt, max_attempts,
                headers::text AS headers, created_at, state, lease_id, last_error,
                errors::text AS errors, started_at, finished_at, unique_key, ordering_key, lease_expires, rate_key
         FROM {schema}.hopper_jobs
         WHERE state = 0 AND queue = $1 AND priority = l.priority
           AND run_at BETWEEN (SELECT lo FROM due) AND (SELECT hi FROM due)
         ORDER BY run_at DESC, id DESC
         LIMIT $7
     ) AS j
     WHERE l.priority IS NOT NULL
     LIMIT $7)
) AS page
ORDER BY priority, run_at DESC, id DESC
LIMIT $7
