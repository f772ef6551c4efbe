-- Rate limits (`Broker::set_rate_limit`, `hopper_core::rate`): at most `max` claims of a
-- queue in any window of `per_ms` milliseconds, whichever broker of the file claims.
--
-- One row per limited queue; a queue without a row has no limit. `starts` is the queue's
-- window as `hopper_core::rate::Window::to_bytes` writes it: the latest claims' (time,
-- jobs) pairs, oldest first, 12 bytes each. A claim reads the row, takes at most `max`
-- less the jobs started within `per_ms` before it, and writes the pairs back with its own
-- appended and those that left the window dropped, all inside the claim's write
-- transaction: the file has one writer at a time, so no other claim, of this process or
-- another, can read the window between that read and that write. Setting a limit again,
-- or changing it, keeps `starts`, so a change never lets a burst through.
--
-- The ranges are those `hopper_core::RateLimit::new` accepts: 1 to 100,000 jobs
-- (`MAX_RATE`), over 1 ms to 100 years (`MAX_DELAY`). WITHOUT ROWID, as `hopper_paused`:
-- a claim of a queue without a limit costs one descent of this small table's key.
CREATE TABLE hopper_rate_limits (
    queue  TEXT    PRIMARY KEY,
    max    INTEGER NOT NULL CHECK (max BETWEEN 1 AND 100000),
    per_ms INTEGER NOT NULL CHECK (per_ms BETWEEN 1 AND 3153600000000),
    starts BLOB    NOT NULL DEFAULT x''
) STRICT, WITHOUT ROWID;

-- When each job's latest attempt started (`JobRecord::started_at`): the claim's time,
-- the same time the claim records in its queue's window. NULL for a job never claimed and
-- for every job claimed before this column. A nullable column with no default is added in
-- place, without rewriting a row.
ALTER TABLE hopper_jobs ADD COLUMN started_at INTEGER;
