DELETE FROM hopper_workers WHERE id = ?
