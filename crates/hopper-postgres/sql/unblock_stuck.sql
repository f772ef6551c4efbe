-- Sweeps up to $1 keys left with blocked jobs and none running or waiting unblocked, as a
-- process that died between a reap, cancel or re-drive and its unblock.sql leaves them,
-- and unblocks their next jobs (hopper_unblock checks each again under its lock; $2 is
-- the time it judges due jobs by, NULL for the server's). Walks
-- the keyed jobs' index: the unfinished jobs with ordering keys, not the table.
SELECT {schema}.hopper_unblock(array_agg(s.queue), array_agg(s.ordering_key), $2::bigint)
FROM (
    SELECT DISTINCT b.queue, b.ordering_key
    FROM {schema}.hopper_jobs AS b
    WHERE b.ordering_key IS NOT NULL AND b.state <= 1 AND b.state = 0
      AND b.run_at > 253402300799999
      AND NOT EXISTS (SELECT FROM {schema}.hopper_jobs AS h
                      WHERE h.queue = b.queue AND h.ordering_key = b.ordering_key
                        AND h.ordering_key IS NOT NULL AND h.state <= 1
                        AND h.run_at <= 253402300799999)
    LIMIT $1
) AS s
