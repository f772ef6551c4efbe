-- One budget's candidates, locked, skipping what other claimers hold. FORCE INDEX: a plan
-- that sorts would read and lock every due job of the queue before applying the LIMIT.
(SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at
 FROM hopper_jobs FORCE INDEX (hopper_jobs_ready)
 WHERE state = 0 AND queue = ? AND run_at <= COALESCE(?, {now})
 ORDER BY priority DESC, run_at, id
 LIMIT ?
 FOR UPDATE SKIP LOCKED)
