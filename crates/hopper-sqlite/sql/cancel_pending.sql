UPDATE hopper_jobs SET state = 4, finished_at = ?2 WHERE id = ?1 AND state = 0
