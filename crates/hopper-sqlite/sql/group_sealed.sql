SELECT sealed FROM hopper_groups WHERE name = ?1
