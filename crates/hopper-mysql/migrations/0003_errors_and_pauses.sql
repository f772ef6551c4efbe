-- What operators ask for: the error of every attempt, dead letters listed in the order
-- they died, and queues paused for every worker.
--
-- `errors` is a JSON array of `{"attempt": N, "at": MS, "error": "..."}`, oldest first,
-- written by the statements that settle a retry or a dead letter and by the reaper; NULL
-- for a job that never failed. LONGTEXT rather than MySQL's JSON type: the JSON functions
-- read text on both servers, and a history another program wrote badly must leave the row
-- readable.
--
-- `hopper_jobs_finished` leads with the queue and leaves `state` out: a claim, a retry or
-- a release changes neither of its columns, so only acks (which delete the row) and jobs
-- that finish write it. Waiting and leased jobs sit in its NULL section, which listings and
-- re-drives skip with `finished_at IS NOT NULL`; it also serves the distinct queue names.
--
-- The paused table first, IF NOT EXISTS; the column and the index in the last statement,
-- so that a second run that finds them there counts the migration as applied.
CREATE TABLE IF NOT EXISTS hopper_paused (
    queue     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    paused_at BIGINT       NOT NULL,
    PRIMARY KEY (queue)
) ENGINE = InnoDB;

ALTER TABLE hopper_jobs
    ADD COLUMN errors LONGTEXT NULL,
    ADD KEY hopper_jobs_finished (queue, finished_at);
