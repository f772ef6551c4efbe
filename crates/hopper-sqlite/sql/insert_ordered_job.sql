-- insert_job.sql for a job with an ordering key (?8): the key kept in the row, and the job
-- stored blocked, its run_at moved ?9 (hopper_core::job::BLOCKED) into the future, when a
-- job of its key in its queue is pending or leased, one inserted earlier in the same batch
-- included. The look and the insert are one statement of the file's only writer, so no
-- job of the key can end between them. ?10 is the job's unique key, kept for its record
-- (NULL without one).
INSERT INTO hopper_jobs (queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at, ordering_key, unique_key)
VALUES (
    ?1, 0, ?2,
    ?3 + CASE WHEN EXISTS (
             SELECT 1 FROM hopper_jobs INDEXED BY hopper_jobs_ordering
             WHERE ordering_key IS NOT NULL AND state <= 1 AND queue = ?1 AND ordering_key = ?8
         ) THEN ?9 ELSE 0 END,
    0, ?4, ?5, ?6, ?7, ?8, ?10
)
