-- Row locks only, no gap locks: a claim's FOR UPDATE SKIP LOCKED must not block enqueues
-- into the range it read, and every statement sees what committed before it.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED
