SELECT max, per_ms FROM hopper_rate_limits WHERE queue = ?1
