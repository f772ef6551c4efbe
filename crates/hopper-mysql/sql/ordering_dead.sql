-- The dead letters among the named jobs that have an ordering key: a re-drive puts them
-- back under their key's lock (`ordering_redrive.sql`), the others as before.
SELECT id, queue, ordering_key
FROM hopper_jobs
WHERE state = 3 AND ordering_key IS NOT NULL AND id IN ({ids})
