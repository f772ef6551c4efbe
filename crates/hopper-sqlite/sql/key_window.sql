SELECT starts FROM hopper_rate_keys WHERE queue = ?1 AND key = ?2
