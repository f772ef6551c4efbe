-- Unique keys (`hopper_core::UniqueScope`): the job holding each key of a queue.
--
-- `scope`: 0 queued, 1 unfinished, 2 for a period (`UniqueScope::code`); `until`, for a
-- period only, when the hold ends (ms since the epoch, the broker's time of the enqueue
-- plus the period). A row says who took the key, not that the hold still stands: that is
-- decided when the next job with the key arrives, from the holder's row in `hopper_jobs`
-- (gone, when it was acknowledged or purged). So claims, settlements and the reaper never
-- touch this table, and jobs without a key pay nothing. A job with a key takes it over
-- from a holder whose hold no longer stands; worker reports delete such rows a chunk at a
-- time, walking the keys in order.
CREATE TABLE hopper_unique (
    queue  TEXT    NOT NULL,
    key    TEXT    NOT NULL,
    job_id INTEGER NOT NULL,
    scope  INTEGER NOT NULL CHECK (scope BETWEEN 0 AND 2),
    until  INTEGER,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;
