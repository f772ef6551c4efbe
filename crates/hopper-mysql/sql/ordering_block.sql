-- Moves the named jobs, which stepped aside for their retry (`ordering_aside.sql`), behind
-- their key: their `run_at` goes {blocked} ahead of their own time, past every claim, until
-- the key lets them run again (`ordering_next.sql`). Only jobs pending at a time of their
-- own: a job is never moved twice.
UPDATE hopper_jobs
SET run_at = run_at + {blocked}
WHERE state = 0 AND finished_at IS NULL AND run_at <= {max_run_at} AND id IN ({ids})
