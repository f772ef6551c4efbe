-- A group's counts, seal and completion job's id.
SELECT members, succeeded, cancelled, sealed, completion_id FROM hopper_groups WHERE name = ?
