DELETE FROM {schema}.hopper_jobs WHERE queue = $1
