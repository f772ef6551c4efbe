SELECT max, per_ms, per_key FROM hopper_rate_limits WHERE queue = ?1
