INSERT INTO hopper_group_dead (group_name, job_id) VALUES (?1, ?2)
