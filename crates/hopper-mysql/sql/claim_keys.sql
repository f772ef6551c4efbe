-- A later read of a claim of a queue limited per key (see `fetch::claim_keyed`): the ids
-- and rate keys of the next due jobs, locked, in claim order, without their payloads; the
-- rows its key windows let through are read whole by `claim_by_ids.sql`. `{priority}` is
-- empty, or `AND priority IN (...)` for a claim by levels (see `claim_levels.sql`).
SELECT id, rate_key
FROM hopper_jobs FORCE INDEX (hopper_jobs_ready)
WHERE state = 0 AND queue = ? {priority} AND run_at <= COALESCE(?, {now})
  AND NOT EXISTS (SELECT 1 FROM hopper_paused WHERE queue = ?)
ORDER BY priority DESC, run_at, id
LIMIT ?
FOR UPDATE SKIP LOCKED
