-- The rows of jobs `{ids}` a claim locked by `claim_keys.sql` and takes, with the columns
-- of `claim.sql` (`limited` 0: the claim holds the queue's limit).
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       ordering_key, 0 AS limited, group_name, rate_key
FROM hopper_jobs
WHERE id IN ({ids})
