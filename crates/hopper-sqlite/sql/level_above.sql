-- The lowest priority above ?2 among a queue's pending jobs: next_level.sql upwards.
SELECT priority
FROM hopper_jobs INDEXED BY hopper_jobs_ready
WHERE state = 0 AND queue = ?1 AND priority > ?2
ORDER BY priority
LIMIT 1
