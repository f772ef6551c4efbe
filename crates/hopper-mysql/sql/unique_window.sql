-- The next holds after a cursor, in key order: one window of the walk that prunes lapsed
-- holds (a range of the primary key, compared column by column), each with its holder's
-- state and attempts charged; NULLs where the holder's row is gone.
SELECT u.queue, u.`key`, u.job_id, u.scope, u.until, j.state, j.attempt
FROM hopper_unique AS u
LEFT JOIN hopper_jobs AS j ON j.id = u.job_id
WHERE u.queue > ? OR (u.queue = ? AND u.`key` > ?)
ORDER BY u.queue, u.`key`
LIMIT ?
