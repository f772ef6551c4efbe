-- The stored windows of keys `{ids}` of a queue limited per key (the list padded by
-- repeating the last key), read under the lock of the queue's limit row.
SELECT rate_key, starts FROM hopper_rate_keys WHERE queue = ? AND rate_key IN ({ids})
