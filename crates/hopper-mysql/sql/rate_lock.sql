-- Locks the limit rows of the queues `{ids}` (sorted, the list padded by repeating the last
-- name) until the claim's transaction ends, in queue order, so that claimers of several
-- limited queues never wait on each other in a cycle; and reads each limit, its window, and
-- the time the claim then goes by (`now_ms`: the broker's own clock, or the database's).
-- Queues without a row (no limit, or lifted since) are not returned and lock nothing: at
-- READ COMMITTED a locking read by primary key locks only the rows it finds.
SELECT queue, CAST(`max` AS SIGNED) AS max_starts, per_ms, starts,
       CAST(COALESCE(?, {now}) AS SIGNED) AS now_ms
FROM hopper_rate_limits
WHERE queue IN ({ids})
ORDER BY queue
FOR UPDATE
