UPDATE hopper_groups SET completion_id = ?2 WHERE name = ?1 AND completion_id IS NULL
