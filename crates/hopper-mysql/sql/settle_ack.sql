DELETE FROM hopper_jobs WHERE state = 1 AND (id, lease_id) IN ({pairs})
