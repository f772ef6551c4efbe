SELECT id, state, lease_id FROM hopper_jobs WHERE id IN ({ids}) FOR UPDATE
