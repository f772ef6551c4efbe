-- The highest priority below ?2 among a queue's pending jobs: one step of a loose index
-- scan over the priority levels of the ready index.
SELECT priority
FROM hopper_jobs INDEXED BY hopper_jobs_ready
WHERE state = 0 AND queue = ?1 AND priority < ?2
ORDER BY priority DESC
LIMIT 1
