-- Deletes a queue's jobs; returns how many, and whether a completion job was enqueued.
-- Members of groups not settled yet (pending or leased) count as cancelled, in this same
-- statement (see settle.sql); members already counted (dead, cancelled, kept completed)
-- are not counted again.
WITH d AS (
    DELETE FROM {schema}.hopper_jobs WHERE queue = $1
    RETURNING id, state, group_name
),
grouped AS (
    SELECT {schema}.hopper_group_count(array_agg(group_name), array_agg(4::smallint),
                                       array_agg(id), $2::bigint, $3::text) AS fired
    FROM d
    WHERE d.group_name IS NOT NULL AND d.state <= 1
    HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM d) AS n, coalesce((SELECT fired FROM grouped), 0) > 0 AS fired
