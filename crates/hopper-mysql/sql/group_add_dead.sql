-- Records a member that died, after those that died before it.
INSERT INTO hopper_group_dead (group_name, job_id) VALUES (?, ?)
