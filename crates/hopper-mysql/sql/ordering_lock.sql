-- Locks the rows of the ordering keys `{pairs}` (queue, key), sorted, making those that are
-- missing, until the transaction ends: enqueues, re-drives and the transactions that end a
-- job of a key that could run take turns on it, and lock shared keys in one order. The
-- assignment changes nothing; it is there for the lock.
INSERT INTO hopper_ordering (queue, `key`)
VALUES {pairs}
ON DUPLICATE KEY UPDATE `key` = `key`
