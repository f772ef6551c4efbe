SELECT state, lease_id FROM {schema}.hopper_jobs WHERE id = $1
