-- The job each of the ordering keys `{pairs}` (queue, key) lets run next, once the job of
-- the key that could run ended or stepped aside: the first unfinished job by id, passing
-- over the jobs that stepped aside for their retry and whose own time has not come (the
-- first value: now); when every job of the key is such, the one whose own time comes
-- first, then by id. A key without unfinished jobs has no row here. The caller unblocks
-- the job when it waits (`ordering_unblock.sql`): a job that runs already, or may, stays.
--
-- A job that stepped aside is told without a column of its own: it waits (pending, its
-- `run_at` past {max_run_at}) and was claimed before (`attempt` above 0), while every
-- other job that waits, enqueued behind its key or re-driven (which starts its attempts
-- over), has attempt 0. Its own time is its `run_at` less {blocked}.
--
-- The first subquery walks the key's range of `hopper_jobs_ordering` in id order and
-- stops at the first job not passed over: with no job stepped aside that is the key's
-- first unfinished job, one dive per key as in `ordering_heads.sql`, and each job stepped
-- aside ahead of it costs one row more. The second sorts the key's jobs by time; COALESCE
-- runs it only when the first found none, so only for keys whose jobs all stepped aside.
--
-- Read after the keys' rows are locked, in a statement of its own, and without locking
-- job rows, as `ordering_heads.sql` is (see there).
SELECT j.id, j.queue, j.ordering_key, j.state, j.run_at
FROM hopper_ordering AS o
JOIN hopper_jobs AS j
  ON j.id = COALESCE(
       (SELECT h.id
        FROM hopper_jobs AS h FORCE INDEX (hopper_jobs_ordering)
        WHERE h.queue = o.queue AND h.ordering_key = o.`key`
          AND h.finished_at IS NULL AND h.state IN (0, 1)
          AND NOT (h.state = 0 AND h.attempt > 0 AND h.run_at > {max_run_at}
                   AND h.run_at - {blocked} > COALESCE(?, {now}))
        ORDER BY h.id
        LIMIT 1),
       (SELECT h.id
        FROM hopper_jobs AS h FORCE INDEX (hopper_jobs_ordering)
        WHERE h.queue = o.queue AND h.ordering_key = o.`key`
          AND h.finished_at IS NULL AND h.state IN (0, 1)
        ORDER BY h.run_at, h.id
        LIMIT 1))
WHERE (o.queue, o.`key`) IN ({pairs})
