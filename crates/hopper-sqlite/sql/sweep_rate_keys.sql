-- Drops a queue's key windows with no start after ?2 (a period before now) and no time
-- given ahead of ?3 (now), and notes the sweep.
DELETE FROM hopper_rate_keys
WHERE queue = ?1 AND coalesce(last_start, ?2) <= ?2 AND coalesce(booked_at, ?3) <= ?3
