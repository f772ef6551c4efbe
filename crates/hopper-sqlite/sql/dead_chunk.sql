-- The ids of a queue's oldest ?2 dead letters, for a re-drive or discard by queue.
SELECT id
FROM hopper_jobs INDEXED BY hopper_jobs_finished
WHERE state >= 2 AND queue = ?1 AND state = 3
ORDER BY finished_at, id
LIMIT ?2
