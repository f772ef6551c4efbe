-- Drops a queue's idle key windows: no start after the first time (a period before now)
-- and no time given ahead of the second (now). Once a period per queue, walking the
-- queue's range of the primary key.
DELETE FROM hopper_rate_keys
WHERE queue = ? AND COALESCE(last_start, ?) <= ? AND COALESCE(booked_at, ?) <= ?
