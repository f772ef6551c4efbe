-- Drops windows `{ids}` of a queue that a claim found idle (no start within a period and
-- no time given ahead).
DELETE FROM hopper_rate_keys WHERE queue = ? AND rate_key IN ({ids})
