DELETE FROM hopper_rate_limits WHERE queue = ?
