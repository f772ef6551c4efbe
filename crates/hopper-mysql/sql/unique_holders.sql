-- The holds of the keys `unique_take.sql` locked (a range of the primary key per key), each
-- with its holder's state and attempts charged; NULLs where the holder's row is gone.
-- The holders' rows are read, not locked: a claim or a settlement never waits on an
-- enqueue.
SELECT u.queue, u.`key`, u.job_id, u.scope, u.until, j.state, j.attempt
FROM hopper_unique AS u
LEFT JOIN hopper_jobs AS j ON j.id = u.job_id
WHERE (u.queue, u.`key`) IN ({pairs})
