-- One job's state, lease, stored `run_at` and ordering key, locked: a cancel of a job with
-- an ordering key decides under the lock whether the key's next job may run.
SELECT state, lease_id, run_at, queue, ordering_key FROM hopper_jobs WHERE id = ? FOR UPDATE
