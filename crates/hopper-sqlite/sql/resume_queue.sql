DELETE FROM hopper_paused WHERE queue = ?1
