DELETE FROM hopper_workers WHERE id = ?1
