-- Dead letters back to pending, due now, as a first attempt: their history and last error
-- stay. Chosen by id ($1, those of them that are dead) or as the oldest $3 of queue $2
-- (NULL when chosen by id); SKIP LOCKED, so two operators re-driving a queue in chunks
-- take different ones. Wakes the workers of every process, as an enqueue does, when any
-- went back. `t.state + 0` keeps the update on the primary key (see settle.sql). A job
-- with an ordering key goes back blocked, and its queue and key come back for the broker
-- to unblock: it then runs once no other job of its key runs or waits unblocked.
WITH now AS (SELECT coalesce($4::bigint, {schema}.hopper_now_ms()) AS ms),
chosen AS (
    SELECT id FROM {schema}.hopper_jobs WHERE id = ANY ($1::bigint[]) AND state = 3
    UNION ALL
    SELECT id FROM (
        SELECT id FROM {schema}.hopper_jobs
        WHERE queue = $2 AND state = 3 AND state >= 2
        ORDER BY finished_at, id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) AS oldest
),
changed AS (
    UPDATE {schema}.hopper_jobs AS t
    SET state = 0,
        attempt = 0,
        run_at = now.ms + CASE WHEN t.ordering_key IS NULL THEN 0 ELSE 4611686018427387904 END,
        finished_at = NULL,
        -- A member re-driven was counted when it died: it is a plain job from now on.
        group_name = NULL,
        lease_id = NULL,
        lease_expires = NULL
    FROM now
    WHERE t.id = ANY (ARRAY(SELECT id FROM chosen)) AND t.state + 0 = 3
    RETURNING t.id, t.queue, t.ordering_key
),
done AS (
    SELECT count(*) AS n,
           array_agg(queue) FILTER (WHERE ordering_key IS NOT NULL) AS queues,
           array_agg(ordering_key) FILTER (WHERE ordering_key IS NOT NULL) AS keys
    FROM changed
)
SELECT n, CASE WHEN n > 0 THEN pg_notify($5, '') IS NOT NULL END AS woke, queues, keys
FROM done
