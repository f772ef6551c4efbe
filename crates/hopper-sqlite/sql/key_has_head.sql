-- Whether key ?2 of queue ?1 has a head: a pending or leased job of the key that is not
-- blocked (past 253402300799999, hopper_core::job::MAX_RUN_AT). Asked after a re-drive put
-- dead letters back blocked, when the key may still have one, before unblock_next.sql,
-- which assumes none. The look walks the key's jobs up to its head, which only a re-drive
-- needs.
SELECT EXISTS (
    SELECT 1 FROM hopper_jobs INDEXED BY hopper_jobs_ordering
    WHERE ordering_key IS NOT NULL AND state <= 1 AND queue = ?1 AND ordering_key = ?2
      AND run_at <= 253402300799999
)
