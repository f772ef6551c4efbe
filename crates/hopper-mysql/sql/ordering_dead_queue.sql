-- The dead letters with an ordering key among a queue's oldest, as `retry_dead_queue.sql`
-- picks them: a re-drive puts those back under their key's lock (`ordering_redrive.sql`),
-- and the statement it picks the others with leaves them out.
SELECT t.id, t.queue, t.ordering_key
FROM hopper_jobs AS t
JOIN (SELECT id
      FROM hopper_jobs FORCE INDEX (hopper_jobs_finished)
      WHERE queue = ? AND finished_at IS NOT NULL AND state = 3
      ORDER BY finished_at, id
      LIMIT ?) AS picked ON t.id = picked.id
WHERE t.state = 3 AND t.ordering_key IS NOT NULL
