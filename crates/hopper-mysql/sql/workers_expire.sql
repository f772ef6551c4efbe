-- Forgets the workers whose report expired (a range of hopper_workers_expires).
DELETE FROM hopper_workers WHERE expires_at <= COALESCE(?, {now})
