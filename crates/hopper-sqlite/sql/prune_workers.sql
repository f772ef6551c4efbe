DELETE FROM hopper_workers WHERE expires_at <= ?1
