SELECT job_id FROM hopper_group_dead WHERE group_name = ?1 ORDER BY seq
