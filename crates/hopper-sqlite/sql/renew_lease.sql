-- Extends every live lease of ?1 (a JSON array of lease ids) in one statement, returning
-- the lease of each job renewed. One walk of the leased jobs' expiry index per call, however
-- many leases it names.
UPDATE hopper_jobs
SET lease_expires = ?2
WHERE state = 1 AND lease_expires > ?3
  AND lease_id IN (SELECT value FROM json_each(?1))
RETURNING lease_id
