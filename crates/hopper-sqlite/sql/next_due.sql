-- The earliest run_at after now among one priority level's pending jobs of a queue: the
-- first entry past now in that level's range of the ready index. A blocked job (past
-- 253402300799999, hopper_core::job::MAX_RUN_AT) is left out: it falls due when the job of
-- its ordering key before it ends, at no time known in advance.
SELECT run_at
FROM hopper_jobs INDEXED BY hopper_jobs_ready
WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at > ?3
  AND run_at <= 253402300799999
ORDER BY run_at
LIMIT 1
