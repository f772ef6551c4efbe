-- The earliest run_at up to now among one priority level's pending jobs of a queue: the
-- first entry of that level's range of the ready index (next_due.sql, the other side of
-- now).
SELECT run_at
FROM hopper_jobs INDEXED BY hopper_jobs_ready
WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at <= ?3
ORDER BY run_at
LIMIT 1
