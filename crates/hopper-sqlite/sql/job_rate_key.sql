SELECT rate_key FROM hopper_jobs WHERE id = ?1
