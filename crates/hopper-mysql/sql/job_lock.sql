-- One job's state, lease, stored `run_at`, ordering key and group, locked: a cancel of a
-- job with an ordering key decides under the lock whether the key's next job may run, and
-- one of a member counts it.
SELECT state, lease_id, run_at, queue, ordering_key, group_name FROM hopper_jobs WHERE id = ? FOR UPDATE
