UPDATE hopper_rate_limits SET max = ?2, per_ms = ?3, starts = ?4 WHERE queue = ?1
