-- Takes each key no job holds for the job just enqueued with it, and locks each key a job
-- does hold, until the transaction ends: `{rows}` of `unique_row.sql`, sorted by queue and
-- key, so that enqueues sharing keys lock them in one order. The assignment changes
-- nothing; it is there for the lock. Whether a hold found still stands is read by the
-- next statement (`unique_holders.sql`): a statement of its own, that reads the holders
-- as they committed before the locks were granted.
INSERT INTO hopper_unique (queue, `key`, job_id, scope, until)
VALUES {rows}
ON DUPLICATE KEY UPDATE job_id = job_id
