-- The first unfinished job of each of the ordering keys `{pairs}` (queue, key): the smallest
-- id among the key's pending and leased jobs, one dive into `hopper_jobs_ordering` per key
-- through the key's row. The job a new job of the key waits behind, or the next to run
-- once the key's running job ended. A key without one has no row here.
--
-- Read after the keys' rows are locked (`ordering_lock.sql`), in a statement of its own: in
-- READ COMMITTED its snapshot is taken then, so it sees what every transaction that held
-- a key's row before committed. The job rows are not locked: a transaction that ends a job
-- locks that job's row before the key's, so an enqueue, which locks keys only, never waits
-- for a job row while holding a key.
SELECT j.id, j.queue, j.ordering_key, j.state, j.run_at
FROM hopper_ordering AS o
JOIN hopper_jobs AS j
  ON j.id = (SELECT h.id
             FROM hopper_jobs AS h FORCE INDEX (hopper_jobs_ordering)
             WHERE h.queue = o.queue AND h.ordering_key = o.`key`
               AND h.finished_at IS NULL AND h.state IN (0, 1)
             ORDER BY h.id
             LIMIT 1)
WHERE (o.queue, o.`key`) IN ({pairs})
