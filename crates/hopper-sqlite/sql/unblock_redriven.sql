-- unblock_next.sql after dead letters of key ?2 of queue ?1 were put back blocked
-- (retry_dead.sql), when the key may still have a head: the next job is unblocked only if
-- no pending or leased job of the key is unblocked. That look walks the key's jobs up to
-- its head, which only a re-drive needs.
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
  AND NOT EXISTS (
        SELECT 1 FROM hopper_jobs INDEXED BY hopper_jobs_ordering
        WHERE ordering_key IS NOT NULL AND state <= 1 AND queue = ?1 AND ordering_key = ?2
          AND run_at <= 253402300799999
    )
