-- Deletes a queue's oldest dead letters; see `retry_dead_queue.sql` for the shape.
DELETE t
FROM hopper_jobs AS t
JOIN (SELECT id
      FROM hopper_jobs FORCE INDEX (hopper_jobs_finished)
      WHERE queue = ? AND finished_at IS NOT NULL AND state = 3
      ORDER BY finished_at, id
      LIMIT ?) AS picked ON t.id = picked.id
WHERE t.state = 3
