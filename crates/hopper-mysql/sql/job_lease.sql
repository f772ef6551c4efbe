SELECT state, lease_id FROM hopper_jobs WHERE id = ?
