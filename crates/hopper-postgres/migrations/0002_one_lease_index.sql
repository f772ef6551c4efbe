-- Leased jobs keep one index, on their expiry: the reaper reads it by range, and renewal
-- reads it too, filtering on the lease id among the jobs in flight. The index by lease id
-- cost every claim an index insert (a fifth of a claim's time at batch 100) and led
-- generic plans to scan every leased job for the reaper.
DROP INDEX {schema}.hopper_jobs_lease_id;

-- Queue names compare byte by byte: they are identifiers (validated to a safe alphabet),
-- and every enqueue and claim compares them while walking the index of pending jobs,
-- which under a language collation calls strcoll for each step. Rewrites the table once.
ALTER TABLE {schema}.hopper_jobs ALTER COLUMN queue TYPE text COLLATE "C";
