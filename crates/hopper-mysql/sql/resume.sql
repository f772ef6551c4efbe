DELETE FROM hopper_paused WHERE queue = ?
