-- The next ordering keys after a cursor, in key order: one window of the walk that deletes
-- the rows of keys without unfinished jobs (a range of the primary key, compared column
-- by column), each saying whether its key has one (a dive into `hopper_jobs_ordering`).
SELECT o.queue, o.`key`,
       CAST(EXISTS (SELECT 1 FROM hopper_jobs AS j FORCE INDEX (hopper_jobs_ordering)
                    WHERE j.queue = o.queue AND j.ordering_key = o.`key`
                      AND j.finished_at IS NULL) AS SIGNED) AS busy
FROM hopper_ordering AS o
WHERE o.queue > ? OR (o.queue = ? AND o.`key` > ?)
ORDER BY o.queue, o.`key`
LIMIT ?
