UPDATE hopper_jobs SET rate_key = ?2 WHERE id = ?1
