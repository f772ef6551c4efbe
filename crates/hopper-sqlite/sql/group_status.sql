SELECT members, succeeded, cancelled, sealed, completion_id FROM hopper_groups WHERE name = ?1
