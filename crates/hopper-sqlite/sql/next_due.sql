SELECT MIN(run_at) FROM hopper_jobs WHERE state = 0 AND queue = ?1 AND run_at > ?2
