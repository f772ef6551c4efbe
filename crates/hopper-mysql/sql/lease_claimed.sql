-- Takes the claimed jobs under the lease, charging an attempt: `started_at` is the claim's
-- time, which a limited queue's window counts the start at.
UPDATE hopper_jobs
SET state = 1, lease_id = ?, lease_expires = COALESCE(?, {now}) + ?, attempt = attempt + 1,
    started_at = COALESCE(?, {now})
WHERE id IN ({ids})
