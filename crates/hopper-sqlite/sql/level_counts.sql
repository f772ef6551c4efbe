-- One priority level's pending jobs of a queue, due (run_at up to ?3) and scheduled, each
-- counted up to a limit (?4, ?5): the two ranges of the level in the ready index, each read
-- no further than its limit (a LIMIT of 0 reads nothing).
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM hopper_jobs INDEXED BY hopper_jobs_ready
        WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at <= ?3
        LIMIT ?4
    )),
    (SELECT count(*) FROM (
        SELECT 1 FROM hopper_jobs INDEXED BY hopper_jobs_ready
        WHERE state = 0 AND queue = ?1 AND priority = ?2 AND run_at > ?3
        LIMIT ?5
    ))
