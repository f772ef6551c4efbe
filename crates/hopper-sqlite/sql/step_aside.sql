-- A job just retried (?1, pending again at its retry time) steps aside for the next jobs
-- of its ordering key (hopper_core::Outcome::Retry's step_aside): when another pending or
-- leased job of its key exists, all of them blocked behind it, it is blocked too, run_at
-- moved ?2 (hopper_core::job::BLOCKED) ahead, and its queue and key are returned for
-- unblock_next.sql to choose the key's next job, which may be itself. Alone on its key,
-- it keeps the key and nothing is returned.
UPDATE hopper_jobs
SET run_at = run_at + ?2
WHERE id = ?1 AND ordering_key IS NOT NULL AND state = 0 AND run_at <= 253402300799999
  AND EXISTS (
        SELECT 1 FROM hopper_jobs AS o INDEXED BY hopper_jobs_ordering
        WHERE o.ordering_key IS NOT NULL AND o.state <= 1 AND o.queue = hopper_jobs.queue
          AND o.ordering_key = hopper_jobs.ordering_key AND o.id <> hopper_jobs.id
    )
RETURNING queue, ordering_key
