SELECT starts, booked_at, booked_n FROM hopper_rate_keys WHERE queue = ?1 AND key = ?2
