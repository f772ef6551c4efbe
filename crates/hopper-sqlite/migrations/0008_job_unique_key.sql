-- The unique key each job was enqueued with (`NewJob::unique_key`), for its record.
--
-- `unique_key`: written by the keyed enqueue in the statement that inserts the job, and
-- kept whether or not the job still holds the key (`hopper_unique` says who holds it), so
-- that a dead letter or a finished job still shows what it was enqueued with. NULL for a
-- job enqueued without a key, and for every job stored before this column. A nullable
-- column with no default is added in place, without rewriting a row.
ALTER TABLE hopper_jobs ADD COLUMN unique_key TEXT;
