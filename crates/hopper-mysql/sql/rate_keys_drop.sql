-- Forgets a queue's key windows: they count nothing without a limit per key.
DELETE FROM hopper_rate_keys WHERE queue = ?
