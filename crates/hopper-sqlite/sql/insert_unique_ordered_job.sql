-- insert_ordered_job.sql for a job with a unique key too: the unique key (?10) kept in the
-- row beside the ordering key, for the job's record.
INSERT INTO hopper_jobs (queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at, ordering_key, unique_key)
VALUES (
    ?1, 0, ?2,
    ?3 + CASE WHEN EXISTS (
             SELECT 1 FROM hopper_jobs INDEXED BY hopper_jobs_ordering
             WHERE ordering_key IS NOT NULL AND state <= 1 AND queue = ?1 AND ordering_key = ?8
         ) THEN ?9 ELSE 0 END,
    0, ?4, ?5, ?6, ?7, ?8, ?10
)
