-- Cancels a pending job; for a job with an ordering key, also its queue and key, whose
-- next job the broker then unblocks. A member of a group is counted as cancelled in this
-- same statement (see settle.sql); `fired` says whether that enqueued the group's
-- completion job.
WITH c AS (
    UPDATE {schema}.hopper_jobs
    SET state = 4, finished_at = coalesce($2::bigint, {schema}.hopper_now_ms())
    WHERE id = $1 AND state = 0
    RETURNING id, CASE WHEN ordering_key IS NOT NULL THEN queue END AS queue, ordering_key,
              group_name
),
grouped AS (
    SELECT {schema}.hopper_group_count(ARRAY[c.group_name], ARRAY[4::smallint], ARRAY[c.id],
                                       $2::bigint, $3::text) AS fired
    FROM c
    WHERE c.group_name IS NOT NULL
)
SELECT c.id, c.queue, c.ordering_key, coalesce((SELECT fired FROM grouped), 0) > 0 AS fired
FROM c
