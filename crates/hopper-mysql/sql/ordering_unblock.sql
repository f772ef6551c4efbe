-- Lets the named jobs run: each was the job its key lets run next, waiting, when
-- `ordering_next.sql` read it. Its `run_at` goes back to its own time. A job that was
-- cancelled meanwhile (its cancel locks its row, not its key's) is left alone: the
-- statement reads the latest committed row, and the key's next job is read again.
UPDATE hopper_jobs
SET run_at = run_at - {blocked}
WHERE state = 0 AND finished_at IS NULL AND run_at > {max_run_at} AND id IN ({ids})
