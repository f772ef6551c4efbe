-- Once the head of key ?2 of queue ?1 has ended (the job of the key that was not blocked:
-- acknowledged, dead-lettered or cancelled), or stepped aside (step_aside.sql), gives the
-- key's next job its own time back, run_at less ?3 (hopper_core::job::BLOCKED). Every
-- pending or leased job of the key is blocked then, since a key has one head, so the next
-- is the first of them by id, passing over those that stepped aside for a retry and whose
-- time (?4 now) has not come: the blocked ones with an attempt charged, as only a job
-- that stepped aside is blocked after it ran (an enqueue and a re-drive block jobs with
-- none). When every one is such, the one due first goes (the second subquery, which runs
-- only then, reading the earliest time, then the first job by id with it). Without
-- stepped-aside jobs the first subquery stops at the key's first job.
UPDATE hopper_jobs
SET run_at = run_at - ?3
WHERE id = coalesce(
        (SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_ordering
         WHERE ordering_key IS NOT NULL AND state <= 1 AND queue = ?1 AND ordering_key = ?2
           AND NOT (attempt > 0 AND run_at > 253402300799999 AND run_at - ?3 > ?4)
         ORDER BY id
         LIMIT 1),
        (SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_ordering
         WHERE ordering_key IS NOT NULL AND state <= 1 AND queue = ?1 AND ordering_key = ?2
           AND run_at = (
                SELECT min(run_at) FROM hopper_jobs INDEXED BY hopper_jobs_ordering
                WHERE ordering_key IS NOT NULL AND state <= 1 AND queue = ?1
                  AND ordering_key = ?2)
         ORDER BY id
         LIMIT 1)
    )
  AND state = 0 AND run_at > 253402300799999
