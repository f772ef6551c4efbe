-- Takes counted members out of their groups: from now on they are plain jobs.
UPDATE hopper_jobs SET group_name = NULL WHERE id IN ({ids})
