-- A job's state and lease, and whether it has an ordering key.
SELECT state, lease_id, CAST(ordering_key IS NOT NULL AS SIGNED) FROM hopper_jobs WHERE id = ?
