-- A job's state and lease, and whether it has an ordering key or a group not counted yet.
SELECT state, lease_id, CAST(ordering_key IS NOT NULL OR group_name IS NOT NULL AS SIGNED) FROM hopper_jobs WHERE id = ?
