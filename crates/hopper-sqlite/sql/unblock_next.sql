-- Once the head of key ?2 of queue ?1 has ended (the job of the key that was not blocked:
-- acknowledged, dead-lettered or cancelled), gives the key's next job its own time back,
-- run_at less ?3 (hopper_core::job::BLOCKED): the pending or leased job of the key with the
-- smallest id, when it is blocked (past 253402300799999, hopper_core::job::MAX_RUN_AT).
-- Every other job of the key is blocked, since a key has one head, so none is looked at.
UPDATE hopper_jobs
SET run_at = run_at - ?3
WHERE id = (
        SELECT id FROM hopper_jobs INDEXED BY hopper_jobs_ordering
        WHERE ordering_key IS NOT NULL AND state <= 1 AND queue = ?1 AND ordering_key = ?2
        ORDER BY id
        LIMIT 1
    )
  AND state = 0 AND run_at > 253402300799999
