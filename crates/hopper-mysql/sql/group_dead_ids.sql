-- The ids of a group's members that died, in the order they did.
SELECT job_id FROM hopper_group_dead WHERE group_name = ? ORDER BY seq
