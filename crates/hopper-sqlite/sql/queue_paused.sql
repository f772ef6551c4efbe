SELECT EXISTS (SELECT 1 FROM hopper_paused WHERE queue = ?1)
