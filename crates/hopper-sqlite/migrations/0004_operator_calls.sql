-- What the operator calls need: every failed attempt's error, queues paused for every
-- worker, and finished jobs listed by queue.
--
-- `errors`: the history of failed attempts, a JSON array of
-- `{"attempt": N, "at": MS, "error": "..."}`, oldest first, at most
-- `hopper_core::admin::ERROR_HISTORY` of them; NULL until the first failure. A nullable
-- column is added in place, without rewriting a row (0003 had to rebuild the table).
ALTER TABLE hopper_jobs ADD COLUMN errors TEXT;

-- Queues no worker takes from: a claim's candidates skip a queue listed here. A handful
-- of rows, read by primary key on every claim.
CREATE TABLE hopper_paused (
    queue     TEXT    PRIMARY KEY,
    paused_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Dead letters, cancelled and completed jobs of a queue, in the order they finished: one
-- index for the three, in place of the dead letters' own, so that a claim or an ack (which
-- test the condition of every partial index on `state`) test no more than before. A query
-- names the index's condition, `state >= 2`, besides the state it wants.
DROP INDEX hopper_jobs_dead;
CREATE INDEX hopper_jobs_finished ON hopper_jobs (queue, state, finished_at, id) WHERE state >= 2;
