DELETE FROM hopper_jobs WHERE id = ?1 AND state = 1 AND lease_id = ?2 AND ordering_key IS NULL AND group_name IS NULL
