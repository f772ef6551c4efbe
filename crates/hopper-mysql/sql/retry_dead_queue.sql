-- Puts a queue's oldest dead letters back, due now, as if never attempted; their errors
-- stay. Picked in a derived table, where an index can be named (a single-table DELETE takes
-- no index hint, and `discard_dead_queue.sql` has this shape too); the outer condition
-- holds for rows that changed since they were picked, and leaves out those with an ordering
-- key, which go back under their key's lock (`ordering_dead_queue.sql`).
UPDATE hopper_jobs AS t
JOIN (SELECT id
      FROM hopper_jobs FORCE INDEX (hopper_jobs_finished)
      WHERE queue = ? AND finished_at IS NOT NULL AND state = 3
      ORDER BY finished_at, id
      LIMIT ?) AS picked ON t.id = picked.id
SET t.state = 0, t.attempt = 0, t.run_at = COALESCE(?, {now}), t.finished_at = NULL
WHERE t.state = 3 AND t.ordering_key IS NULL
