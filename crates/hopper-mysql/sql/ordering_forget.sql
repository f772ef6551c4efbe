-- Deletes the rows of the named keys that still have no unfinished job. Deleting a key's
-- row is safe whenever it happens: the next enqueue of the key makes it again, and one
-- waiting on it then takes the new row.
DELETE FROM hopper_ordering
WHERE (queue, `key`) IN ({pairs})
  AND NOT EXISTS (SELECT 1 FROM hopper_jobs AS j FORCE INDEX (hopper_jobs_ordering)
                  WHERE j.queue = hopper_ordering.queue
                    AND j.ordering_key = hopper_ordering.`key`
                    AND j.finished_at IS NULL)
