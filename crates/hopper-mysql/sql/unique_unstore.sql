-- Deletes again the jobs just inserted whose key another job holds: the enqueue answers
-- with the holder instead.
DELETE FROM hopper_jobs WHERE id IN ({ids})
