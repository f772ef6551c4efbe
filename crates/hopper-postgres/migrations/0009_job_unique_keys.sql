-- The unique key each job was enqueued with (hopper_core::JobRecord::unique_key), for
-- operators to see on its record whether or not the job still holds it: hopper_unique
-- names only the current holder of a key, and forgets it once the hold lapses.
--
-- Written only by enqueue_unique.sql, in the insert that stores the job; enqueue.sql
-- leaves it NULL, as it is for every job stored before this migration. Nullable without a
-- default, so adding it rewrites no row and the lock it takes lasts as long as the
-- catalog change. No index: nothing looks a job up by it (hopper_unique does that).
ALTER TABLE {schema}.hopper_jobs ADD COLUMN unique_key text COLLATE "C";
