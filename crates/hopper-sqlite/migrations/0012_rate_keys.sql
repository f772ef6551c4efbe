-- Rate limits per key (`hopper_core::RateLimit::per_key`, `NewJob::rate_key`): a window
-- for each rate key of a limited queue's jobs instead of one for the queue.
--
-- A job's rate key, NULL for a job without (whose starts count in the window of the empty
-- key). Nullable without a default: added in place, without rewriting a row.
ALTER TABLE hopper_jobs ADD COLUMN rate_key TEXT;

-- Whether the queue's limit holds per key (1) or for the queue (0), and when the claims
-- last dropped the queue's idle key windows.
ALTER TABLE hopper_rate_limits ADD COLUMN per_key INTEGER NOT NULL DEFAULT 0;
ALTER TABLE hopper_rate_limits ADD COLUMN swept_at INTEGER NOT NULL DEFAULT 0;

-- One window per key seen within a period: `starts` as `hopper_core::rate::Window`
-- writes it, the time of its latest start, and the latest time the last claim gave a job
-- of the key held back by the full window (`Window::defer`) and how many it gave it to:
-- the sweep keeps a window while jobs are due at such a time. A claim
-- reads and writes a key's row inside its write transaction, as it does the queue's.
-- Rows with no start within the period and no time given ahead are dropped by the claims,
-- at most once a period per queue.
CREATE TABLE hopper_rate_keys (
    queue      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    starts     BLOB    NOT NULL DEFAULT x'',
    last_start INTEGER,
    booked_at  INTEGER,
    booked_n   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;
