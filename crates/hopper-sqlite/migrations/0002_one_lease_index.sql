-- Leased jobs keep one index, on their expiry: the reaper reads it by range, and renewal
-- reads it too, filtering on the lease id among the jobs in flight. The index by lease id
-- cost every claim an insert and every settlement a delete.
DROP INDEX hopper_jobs_lease;
