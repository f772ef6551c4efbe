-- One budget's candidates among the queue's pending priority levels (`{levels}`, looked
-- up just before in the same transaction), each read as a range of due jobs. `claim.sql`
-- walks every pending job of a level, delayed ones included, until it fills its LIMIT,
-- which a short claim never does (with 200,000 delayed jobs and 2 due: 64-71 ms a claim).
-- Paused queues are skipped, and limited ones told, as in `claim.sql`.
(SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
        ordering_key,
        CAST(EXISTS (SELECT 1 FROM hopper_rate_limits WHERE queue = ?) AS SIGNED) AS limited,
        group_name, rate_key
 FROM hopper_jobs FORCE INDEX (hopper_jobs_ready)
 WHERE state = 0 AND queue = ? AND priority IN ({levels}) AND run_at <= COALESCE(?, {now})
   AND NOT EXISTS (SELECT 1 FROM hopper_paused WHERE queue = ?)
 ORDER BY priority DESC, run_at, id
 LIMIT ?
 FOR UPDATE SKIP LOCKED)
