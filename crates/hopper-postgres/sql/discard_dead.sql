-- Deletes dead letters, chosen as retry_dead.sql chooses them ($1 ids, or the oldest $3 of
-- queue $2).
WITH chosen AS (
    SELECT id FROM {schema}.hopper_jobs WHERE id = ANY ($1::bigint[]) AND state = 3
    UNION ALL
    SELECT id FROM (
        SELECT id FROM {schema}.hopper_jobs
        WHERE queue = $2 AND state = 3 AND state >= 2
        ORDER BY finished_at, id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) AS oldest
)
DELETE FROM {schema}.hopper_jobs AS t
WHERE t.id = ANY (ARRAY(SELECT id FROM chosen)) AND t.state + 0 = 3
