-- Records the id of a group's completion job, unless it has one.
UPDATE hopper_groups SET completion_id = ? WHERE name = ? AND completion_id IS NULL
