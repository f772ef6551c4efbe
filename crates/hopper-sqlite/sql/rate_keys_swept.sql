UPDATE hopper_rate_limits SET swept_at = ?2 WHERE queue = ?1
