-- Locks the limit rows of the queues `{ids}` (sorted, the list padded by repeating the last
-- name) until the claim's transaction ends, in queue order, so that claimers of several
-- limited queues never wait on each other in a cycle; and reads each limit, its window, the
-- time the claim then goes by (`now_ms`: the broker's own clock, or the database's), and,
-- for a queue limited per key, when its idle key windows were last dropped (NULL for a
-- limit of the whole queue; its row of `hopper_rate_per_key` is locked too). Queues without
-- a row (no limit, or lifted since) are not returned and lock nothing: at READ COMMITTED a
-- locking read by primary key locks only the rows it finds.
SELECT l.queue, CAST(l.`max` AS SIGNED) AS max_starts, l.per_ms, l.starts,
       CAST(COALESCE(?, {now}) AS SIGNED) AS now_ms, k.swept_at
FROM hopper_rate_limits AS l
LEFT JOIN hopper_rate_per_key AS k ON k.queue = l.queue
WHERE l.queue IN ({ids})
ORDER BY l.queue
FOR UPDATE
