-- Leased jobs keep one index, on their expiry: the reaper reads it by range, and renewal
-- reads it too, filtering on the lease id among the jobs in flight. The index by lease id
-- cost every claim an insert and every settlement a delete.
DROP INDEX hopper_jobs_lease;

-- The index of pending jobs by (queue, run_at) goes too: the earliest delayed job is found
-- level by level in the ready index (one descent per priority level), so every enqueue and
-- claim no longer maintains a second index of pending jobs.
DROP INDEX hopper_jobs_due;
