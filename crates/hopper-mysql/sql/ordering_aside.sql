-- Of the named jobs, each just put back for its retry by a settlement that steps it aside,
-- those whose ordering key has another unfinished job: they wait behind the key
-- (`ordering_block.sql`), and the others keep their key, as a plain retry does. The jobs
-- are locked by the settlement and their keys' rows held; the other jobs are read as
-- `ordering_heads.sql` reads them, without locks, each key's first two unfinished jobs at
-- most.
SELECT j.id
FROM hopper_jobs AS j
WHERE j.id IN ({ids}) AND j.state = 0 AND j.finished_at IS NULL AND j.run_at <= {max_run_at}
  AND EXISTS (SELECT 1
              FROM hopper_jobs AS h FORCE INDEX (hopper_jobs_ordering)
              WHERE h.queue = j.queue AND h.ordering_key = j.ordering_key
                AND h.finished_at IS NULL AND h.state IN (0, 1) AND h.id <> j.id)
